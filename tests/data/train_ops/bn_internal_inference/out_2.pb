Bout_2JœŸKiZí?âÆ`±á
÷?Ec\4Lò?