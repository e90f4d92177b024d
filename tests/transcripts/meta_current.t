# memcached-differs: current memcached's meta protocol (1.6.4x); 1.6.18 has no ms E or mg C, no ms s, and other flag errors
# Recorded from current memcached (see docs/compat.md, "How the reference answers were recorded").
# ms s: the size stored; after an append, the whole value.
> ms k 2 s
> ab
< HD s2
> ms k 2 MA s c k Oz
> cd
< HD s4 c{n} kk Oz
> mg k v s
< VA 4 s4
< abcd
# Nothing stored: c is 0 and s the request's length, in request order.
> ms miss 2 c s k MR Oab
> xy
< NS c0 s2 kmiss Oab
> ms k 2 C1 c s k
> xy
< EX c0 s2 kk
> ms k 2 MA s c q
> ef
> mn
< MN
# ms E sets the CAS; mg C answers HD (no value) when the client's CAS is current.
> ms k 2 E77
> ab
< HD
> mg k v C77 c s
< HD c77 s2
> mg k v C78 c s
< VA 2 c77 s2
< ab
> mg k C77 c
< HD c77
# The M token's first character is the mode; the rest is ignored.
> ms k 1 MSS
> x
< HD
> ma k M
< CLIENT_ERROR invalid mode for ma M token
> ms k 1 M
> x
< CLIENT_ERROR invalid mode for ms M token
# A flag that starts with neither a letter nor a digit: the tokenizer refuses the line (an ms's data is then a command).
> mg mk !
< CLIENT_ERROR bad command line format
> md k !
< CLIENT_ERROR bad command line format
> ma k v {
< CLIENT_ERROR bad command line format
> ms k 2 v !
> xy
< CLIENT_ERROR bad command line format
< ERROR
> mg mk 1
< CLIENT_ERROR invalid flag
> mn
< MN
# mg N with E: the vivified item takes the client's CAS (recorded from current memcached).
> mg viv N30 E999 c v
< VA 0 c999 W
<
> mg viv c
< HD c999 Z
> mg viv2 E555 c v
< EN
> mg viv3 N0 E7 c s
< HD c7 s0 W
> ms viv3 1 C7 E8 c
> x
< HD c8
> mg viv3 c v
< VA 1 c8
< x
# A key stored with b comes back encoded, with b, even to a request without b;
# a plain append makes it a plain key again (recorded from current memcached).
> ms Zm9vMg== 1 b
> x
< HD
> mg foo2 k v
< VA 1 kZm9vMg== b
< x
> mg Zm9vMg== b k s
< HD kZm9vMg== b s1
> ms foo2 1 MA
> y
< HD
> mg foo2 k v
< VA 2 kfoo2
< xy
