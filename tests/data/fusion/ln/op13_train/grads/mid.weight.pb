B
mid.weightJ H$ >,kֵ=eFP½'>נמ=ִG=7'·>~I>