# Meta edge cases, checked against memcached 1.6.18.
> mg miss v k Oab
< EN kmiss Oab
> mg miss k q
> mn
< MN
> ms k1 2 c k Oxy
> hi
< HD c{n} kk1 Oxy
> mg k1 q
< HD
> mg k1 s v q k
< VA 2 s2 kk1
< hi
# Vivify on miss: the first reader wins, the next sees Z.
> mg viv N30 v s t
< VA 0 s0 t30 W
<
> mg viv N30 v s t
< VA 0 s0 t30 Z
<
# Invalidate: stale item, one winner.
> md k1 I T30
< HD
> mg k1 v
< VA 2 X W
< hi
> mg k1 v
< VA 2 Z X
< hi
> ms k1 2 MX
> hi
< CLIENT_ERROR invalid mode for ms M token
> ms k1 2 ME q
> hi
> mn
< NS
< MN
> ma nope q
> mn
< NF
< MN
> ms n 1
> 5
< HD
> ma n q
> mn
< MN
> ma n t v
< VA 1 t-1
< 7
> mg k1 v O123456789012345678901234567890123
< CLIENT_ERROR opaque token too long
> me
< CLIENT_ERROR bad command line format
> ms k1
< CLIENT_ERROR bad command line format
> ms k1 abc
< CLIENT_ERROR bad command line format
> ms k1 -1
< CLIENT_ERROR bad command line format
> mg k1 Tabc
< CLIENT_ERROR bad token in command line format
> ms k1 1 Fabc
> x
< CLIENT_ERROR bad command line format
> ma k1 Jabc
< CLIENT_ERROR invalid or duplicate flag
> ms k1 1 [
> x
< CLIENT_ERROR invalid flag
> ms k1 2 T-1
> hi
< HD
> mg k1 v
< EN
> mn extra
< MN
# base64 keys
> ms Zm9v 1 b k
> z
< HD kZm9v b
> mg Zm9v b k v
< VA 1 kZm9v b
< z
> ma k MX
< CLIENT_ERROR invalid mode for ma M token
