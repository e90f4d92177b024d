# memcached-differs: memcached lists one slab class's COLD queue, which is empty right after a set while its LRU maintainer runs (1.6.18's default); recall lists every item under class 1
# Recorded from current memcached run with -o no_lru_maintainer (new items go straight to COLD).
> set foo 0 0 6
> fooval
< STORED
> set bar 0 100 2
> hi
< STORED
> stats cachedump 1 1
< ITEM {*}
< END
> delete bar
< DELETED
> stats cachedump 1 0
< ITEM foo [6 b; 0 s]
< END
> set bar 0 100 2
> hi
< STORED
> stats cachedump 1 2
< ITEM {*}
< ITEM {*}
< END
> delete foo
< DELETED
> stats cachedump 1 100
< ITEM bar [2 b; {n} s]
< END
# watch after other requests in the same batch is refused (1.6.18 accepted this one).
> get a
> watch
< END
< ERROR cannot pipeline other commands before watch
