> verbosity x
< CLIENT_ERROR bad command line format
> verbosity 1 noreply
> cache_memlimit 4
< MEMLIMIT_TOO_SMALL cannot set maxbytes to less than 8m
> cache_memlimit x
< ERROR
> stats bogus
< ERROR
> stats detail
< CLIENT_ERROR usage: stats detail on|off|dump
> stats detail on
< OK
> stats reset
< RESET
> lru_crawler bogus
< ERROR
> flush_all 0 noreply
> flush_all bogus noreply
> incr k 18446744073709551616
< CLIENT_ERROR invalid numeric delta argument
> set k 0 0 1
> 1
< STORED
> incr k 1 noreply
> get k
< VALUE k 0 1
< 2
< END
