# exptime: relative up to 30 days, absolute above, negative = expired.
> set rel 0 10 1
> r
< STORED
> set neg 0 -1 1
> n
< STORED
> get neg
< END
@advance 9
> get rel
< VALUE rel 0 1
< r
< END
@advance 1
> get rel
< END
# gat returns the value and sets a new TTL; touch extends too.
> set g 0 5 1
> g
< STORED
> gat 100 g
< VALUE g 0 1
< g
< END
@advance 50
> gats 0 g missing
< VALUE g 0 1 {n}
< g
< END
@advance 100000
> get g
< VALUE g 0 1
< g
< END
# flush_all with a delay.
> flush_all 10
< OK
@advance 9
> get g
< VALUE g 0 1
< g
< END
@advance 2
> get g
< END
