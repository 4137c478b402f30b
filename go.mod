module minfer-examples

go 1.19

require minfer v0.0.0

replace minfer => ./bindings/go
