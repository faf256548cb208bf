# ---- the CUDA backend on a host emulation (runtime/cuda/emu/cuda_emu.h) ----
# The same sources as vplan_cuda: the .cu kernels rewritten to C++ (rewrite.cmake) and
# compiled by the host compiler, the backend's C files against the emulator's headers.
# It is its own library, vplan_cuda_emu, which the tests link in place of vplan_cuda,
# and onnx-vplan-cuda-emu, the command with `run --backend cuda` on it; onnx-vplan
# itself links the real backend or none.  On by default where no GPU is.
set(VP_CUDA_EMU_DEFAULT ON)
if(VP_HAVE_CUDA AND EXISTS /dev/nvidia0)
  set(VP_CUDA_EMU_DEFAULT OFF)
endif()
option(VP_CUDA_EMU "Build the CUDA backend on a host emulation of CUDA for the tests" ${VP_CUDA_EMU_DEFAULT})
if(VP_CUDA_EMU)
  enable_language(CXX)
  set(VP_EMU_DIR ${CMAKE_SOURCE_DIR}/runtime/cuda/emu)
  file(GLOB VP_EMU_CU CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/runtime/cuda/*.cu)
  file(GLOB VP_EMU_C CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/runtime/cuda/*.c)
  file(GLOB VP_EMU_HEADERS CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/runtime/cuda/*.h ${CMAKE_SOURCE_DIR}/runtime/cuda/*.cuh)
  # .cu files -> C++ in the build tree; the list of them in out_var
  function(vp_cuda_emu_rewrite out_var)
    set(gen)
    foreach(cu ${ARGN})
      get_filename_component(base ${cu} NAME_WE)
      set(cc ${CMAKE_BINARY_DIR}/cuda_emu/${base}.cc)
      add_custom_command(OUTPUT ${cc}
        COMMAND ${CMAKE_COMMAND} -DIN=${cu} -DOUT=${cc} -P ${VP_EMU_DIR}/rewrite.cmake
        DEPENDS ${cu} ${VP_EMU_DIR}/rewrite.cmake
        COMMENT "Rewriting ${base}.cu for the CUDA emulation")
      list(APPEND gen ${cc})
    endforeach()
    set_source_files_properties(${gen} PROPERTIES OBJECT_DEPENDS "${VP_EMU_HEADERS};${VP_EMU_DIR}/cuda_emu.h")
    set(${out_var} ${gen} PARENT_SCOPE)
  endfunction()
  vp_cuda_emu_rewrite(VP_EMU_GEN ${VP_EMU_CU})
  add_library(vplan_cuda_emu STATIC ${VP_EMU_C} ${VP_EMU_GEN} ${VP_EMU_DIR}/cuda_emu.cc ${VP_EMU_DIR}/cuda_emu_launch.cc ${VP_EMU_DIR}/cuda_emu_blas.cc)
  set_target_properties(vplan_cuda_emu PROPERTIES CXX_STANDARD 17 CXX_STANDARD_REQUIRED ON CXX_EXTENSIONS OFF)
  target_include_directories(vplan_cuda_emu BEFORE PRIVATE ${VP_EMU_DIR}/include ${VP_EMU_DIR})
  target_include_directories(vplan_cuda_emu PUBLIC ${CMAKE_SOURCE_DIR}/runtime/cuda)
  target_compile_options(vplan_cuda_emu PRIVATE $<$<COMPILE_LANGUAGE:C>:-Wall -Wextra>
                         $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wno-unused-function>)
  # every thread of every launch runs these: -O1 in a Debug (sanitizer) build keeps the
  # emulated steps within the test's time, and AddressSanitizer sees as much
  target_compile_options(vplan_cuda_emu PRIVATE $<$<AND:$<CONFIG:Debug>,$<COMPILE_LANGUAGE:CXX>>:-O1>)
  target_compile_definitions(vplan_cuda_emu PUBLIC VP_HAVE_CUDA=1 VP_CUDA_EMU=1)
  target_link_libraries(vplan_cuda_emu PUBLIC vplan ${OPENBLAS_LIB})

  add_executable(onnx-vplan-cuda-emu ${VP_TOOL_SRC})
  target_compile_options(onnx-vplan-cuda-emu PRIVATE -Wall -Wextra)
  target_link_libraries(onnx-vplan-cuda-emu PRIVATE vplan_cuda_emu)
endif()
