# Serve-stale with the clock (memcached's t/metaget.t, "serve stale with
# mdelete"), answered as memcached 1.6.45's memcached-debug answers it with
# `debugtime` in place of @advance (CAS values aside); engine only.
# md I T30 makes the item stale with 30 s to live; the first mg wins (W).
> set toinv 0 0 3
> moo
< STORED
> md toinv I T30
< HD
@advance 5
> mg toinv s t v
< VA 3 s3 t25 X W
< moo
# C0 matches no item: the set fails.
> ms toinv 1 T90 C0
> f
< EX
# A stale set (I, a CAS older than the item's) stores the value but keeps
# the item stale, its expiry (T90 is not applied) and its sent win token.
> ms toinv 1 I T90 C1
> f
< HD
> mg toinv s t v
< VA 1 s1 t25 Z X
< f
# md x with T and F: an empty, fresh item with that expiry and those flags;
# without them, one that never expires, with flags 0.
> md toinv x T40 F3
< HD
> mg toinv s t f
< HD s0 t40 f3
> md toinv x
< HD
> mg toinv s t f
< HD s0 t-1 f0
# x with I: the empty item is stale, and the next mg wins it.
> ms toinv 2 T50
> mz
< HD
> md toinv x I
< HD
> mg toinv s v
< VA 0 s0 X W
<
