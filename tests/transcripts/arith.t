# incr/decr: decimal uint64, incr wraps, decr floors at 0 (protocol.txt).
> incr n 1
< NOT_FOUND
> set n 0 0 2
> 10
< STORED
> incr n 5
< 15
> decr n 100
< 0
> get n
< VALUE n 0 2
< 0 
< END
> set big 0 0 20
> 18446744073709551615
< STORED
> incr big 1
< 0
> set s 0 0 3
> abc
< STORED
> incr s 1
< CLIENT_ERROR cannot increment or decrement non-numeric value
> incr s abc
< CLIENT_ERROR invalid numeric delta argument
> incr n 1 noreply
> get n
< VALUE n 0 2
< 1 
< END
