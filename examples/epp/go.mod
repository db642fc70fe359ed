module example.com/epp

go 1.19
