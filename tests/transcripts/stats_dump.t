# stats cachedump's argument checks, and a slab class that holds nothing
# (recall lists every item under class 1, see stats_dump_current.t).
> set foo 0 0 6
> fooval
< STORED
> stats cachedump 2 0
< END
> stats cachedump 63 1
< END
> stats cachedump 64 1
< CLIENT_ERROR Illegal slab id
> stats cachedump 1
< CLIENT_ERROR bad command line
> stats cachedump
< CLIENT_ERROR bad command line
> stats cachedump x 1
< CLIENT_ERROR bad command line format
> stats cachedump 1 -1
< CLIENT_ERROR bad command line format
> stats detail
< CLIENT_ERROR usage: stats detail on|off|dump
> watch bogus
< ERROR
