module example.com/ranker

go 1.19
