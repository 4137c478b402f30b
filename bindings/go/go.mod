module minfer

go 1.19
