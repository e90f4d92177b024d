# stats detail: per-prefix counts (prefix = the key up to its first ':') of
# the classic commands' gets, hits, sets and deletes, while switched on.
# Meta commands are not counted, as in memcached.
> stats detail off
< OK
> stats reset
< RESET
> stats detail dump
< END
> set p:1 0 0 1
> x
< STORED
> stats detail dump
< END
> stats detail on
< OK
> set p:1 0 0 1
> x
< STORED
> get p:1 p:2 nodelimiter
< VALUE p:1 0 1
< x
< END
> delete p:1
< DELETED
> set nodelimiter 0 0 1 noreply
> y
> mg p:1 v
< EN
> ms p:1 1
> z
< HD
> stats detail dump
< PREFIX p get 2 hit 1 set 1 del 1
< END
> stats detail off
< OK
> get p:1
< VALUE p:1 0 1
< z
< END
> stats detail dump
< PREFIX p get 2 hit 1 set 1 del 1
< END
> stats reset
< RESET
> stats detail dump
< END
