# vplan.mk: a training step from an ONNX model, as make rules (GNU make).
#
#     include $(PREFIX)/share/vplan/vplan.mk      # installed by `cmake --install`
#     VPLAN_DIMS = batch=32
#     VPLAN_LOSS = ce:logits
#     train: main.o mlp_step.o
#             $(CC) -o $@ $^ $(VPLAN_LIBS)
#
# gives the chain  STEM.onnx -> STEM.vplan -> STEM_step.c, STEM_step.h, STEM.weights ->
# STEM_step.o  (STEM's file name must be a C identifier: it names NAME_step()).  The plan
# depends on the model and on its options: they are written to STEM.vplan-opts, which is
# rewritten only when they change, so a second `make` does nothing, and touching the
# model or changing an option rebuilds the plan, the source and the object.
#
# Options, each overridable for one model as STEM_VPLAN_...  (mlp_VPLAN_DIMS = batch=8):
#   VPLAN_DIMS        symbolic dims, NAME=VALUE words      (--dim)
#   VPLAN_LOSS        ce:LOGITS | mse:OUTPUT | output:NAME  (--loss)
#   VPLAN_OPTIMIZER   sgd | momentum | adam | adamw         (--optimizer, default adamw)
#   VPLAN_BUDGET      a memory budget: 16GiB, 800MB         (--budget; none by default)
#   VPLAN_PRECISION   fp32 | bf16 | fp16                    (--precision, default fp32)
#   VPLAN_PLAN_FLAGS  any other plan options (--lr 0.01 --freeze '^mask$$' --remat dp: a
#                     dollar is $$ in make)
#   VPLAN_CODEGEN_FLAGS  codegen options (--embed-weights)
# Tools and flags (defaults from the prefix this file was installed in):
#   VPLAN (the onnx-vplan command), VPLAN_CFLAGS, VPLAN_LIBS (link a program with them),
#   VPLAN_STEP_CFLAGS (added for the generated step only: -fno-math-errno lets GCC run
#   its optimizer loops in vector lanes; no result changes).

VPLAN_HOME := $(abspath $(dir $(lastword $(MAKEFILE_LIST)))/../..)
VPLAN_LIBDIR ?= $(patsubst %/,%,$(dir $(firstword $(wildcard $(VPLAN_HOME)/lib/libvplanrt.* $(VPLAN_HOME)/lib*/*/libvplanrt.*))))
VPLAN ?= $(firstword $(wildcard $(VPLAN_HOME)/bin/onnx-vplan) onnx-vplan)
VPLAN_CFLAGS ?= -std=c17 -I$(VPLAN_HOME)/include/vplan
VPLAN_STEP_CFLAGS ?= -O2 -fno-math-errno
VPLAN_LIBS ?= -L$(VPLAN_LIBDIR) -Wl,-rpath,$(VPLAN_LIBDIR) -lvplanrt -lopenblas -ldnnl -fopenmp -lm

VPLAN_DIMS ?=
VPLAN_LOSS ?=
VPLAN_OPTIMIZER ?= adamw
VPLAN_BUDGET ?=
VPLAN_PRECISION ?= fp32
VPLAN_PLAN_FLAGS ?=
VPLAN_CODEGEN_FLAGS ?=

# $(call vplan_opt,STEM,VAR): STEM_VAR where set, else VAR
vplan_opt = $(or $($(notdir $1)_$2),$($2))
vplan_plan_args = $(foreach d,$(call vplan_opt,$1,VPLAN_DIMS),--dim $d) \
    $(if $(call vplan_opt,$1,VPLAN_LOSS),--loss $(call vplan_opt,$1,VPLAN_LOSS)) \
    --optimizer $(call vplan_opt,$1,VPLAN_OPTIMIZER) --precision $(call vplan_opt,$1,VPLAN_PRECISION) \
    $(if $(call vplan_opt,$1,VPLAN_BUDGET),--budget $(call vplan_opt,$1,VPLAN_BUDGET)) \
    $(call vplan_opt,$1,VPLAN_PLAN_FLAGS)
vplan_codegen_args = $(call vplan_opt,$1,VPLAN_CODEGEN_FLAGS)

# $(call vplan_stamp,STEM): writes STEM.vplan-opts when its content would change, and
# names it.  Called while make reads a rule's prerequisites (secondary expansion), after
# the whole makefile is read, so options set after the include count too.
vplan_stamp = $(shell f='$1.vplan-opts'; printf '%s\n' '$(subst ','\'',$(strip $(call vplan_plan_args,$1)) | $(strip $(call vplan_codegen_args,$1)))' > "$$f.tmp" && \
    if cmp -s "$$f.tmp" "$$f"; then rm -f "$$f.tmp"; else mv -f "$$f.tmp" "$$f"; fi)$1.vplan-opts

.SECONDEXPANSION:

%.vplan: %.onnx $$(call vplan_stamp,$$*)
	$(VPLAN) plan $< $(call vplan_plan_args,$*) -o $@

# the stamp is written by vplan_stamp; this rule only says it can exist (make caches
# directory listings, so a file made during expansion is not seen as made otherwise)
%.vplan-opts: ;

# one codegen run makes both (and STEM.weights beside them, unless --embed-weights)
%_step.c %_step.h: %.vplan
	$(VPLAN) codegen $< -o $(or $(patsubst %/,%,$(dir $*)),.) --prefix $(notdir $*) $(call vplan_codegen_args,$*)

%_step.o: %_step.c %_step.h
	$(CC) $(VPLAN_CFLAGS) $(VPLAN_STEP_CFLAGS) $(CFLAGS) -c $< -o $@

# the chain's intermediates are kept: the plan and the weights are products too
.PRECIOUS: %.vplan %.vplan-opts %_step.c %_step.h
