B
ln2.weightJ "e=$İq=qh¼ûÆ¼;–ı<Ã«Y¼q :@`$=