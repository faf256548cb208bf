Bin_0JªQRæêª
@