B
conv1.biasJfÿƒ=6Â»Òo½j«ü<