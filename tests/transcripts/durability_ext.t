# memcached-differs: recall's durability extensions (docs/durability.md)
> durable
< DURABLE 0 0 off
> snapshot
< SERVER_ERROR durability is off (start recalld with --data-dir)
# Replay applies only writes newer than the stored version.
> replay k 5 0 1000 2
> v1
< APPLIED
> replay k 5 0 900 2
> v0
< STALE newer
> get k
< VALUE k 5 2
< v1
< END
> replay_delete k 1100
< APPLIED
> get k
< END
> replay k 0 0 1200 2 noreply
> v2
> gets k
< VALUE k 0 2 1200
< v2
< END
# New writes are newer than anything replayed: the set draws a timestamp
# above 1200, so a replay of 1200 (the newest replayed write) is stale.
> set k 0 0 2
> v3
< STORED
> replay k 0 0 1200 2
> v9
< STALE newer
# md with c returns the delete timestamp (recall extension; memcached ignores c on md)
> ms dk 1 c
> x
< HD c{n}
> md dk c
< HD c{n}
> md dk c
< NF
# Lost-update detection (recall extension): mg with w<ts>, the client's
# own last write of the key. Stored older than ts: OL, no value.
> replay lk 3 0 5000 1
> x
< APPLIED
> mg lk v c w5000
< VA 1 c5000
< x
> mg lk v f c w5001 Oq k
< OL f3 c5000 Oq klk
> mg lk w4000 s
< HD s1
> mg lkmissing v w1
< EN
> mg lk v wx
< CLIENT_ERROR bad token in command line format
# The bytes a write left, for a client's backup (recall extensions,
# docs/durability-protocol.md section 5): `ma` with `s` returns the stored
# length (a shorter number is rewritten in place, padded with spaces) and
# `f` the client flags; `ms` with `v` returns the item the write produced
# (after an append, the whole value), with `f` and `t`.
> set pc 7 0 4
> 1000
< STORED
> ma pc MD D995 v s f
< VA 1 s4 f7
< 5
> ma pc v s f t
< VA 1 s4 f7 t-1
< 6
> set pl 0 0 2
> 99
< STORED
> ma pl v s
< VA 3 s3
< 100
> ms pc 2 MA c v f t
> xy
< VA 6 c{n} f7 t-1
< 6   xy
> ms pc 2 MP v s
> ab
< VA 8 s8
< ab6   xy
> ms pn 2 v f c
> hi
< VA 2 f0 c{n}
< hi
> ms pmissing 2 MA v
> hi
< NS
# The client registry without a data directory.
> hello app-1
< DURABLE 0 0 off
> replay_done app-1
< OK
> goodbye app-1
< OK
> hello bad	id
< CLIENT_ERROR bad client id
# timestamps on (recall extension, per connection): storage, delete and
# incr/decr replies carry the write's timestamp.
> timestamps on
< OK
> set tk 0 0 1
> 5
< STORED {n}
> incr tk 2
< 7 {n}
> decr tk 1
< 6 {n}
> delete tk
< DELETED {n}
> delete tk
< NOT_FOUND
> add tk 0 0 1
> 1
< STORED {n}
> add tk 0 0 1
> 1
< NOT_STORED
> set tk 0 0 1 noreply
> 2
> gets tk
< VALUE tk 0 1 {n}
< 2
< END
> timestamps off
< OK
> set tk 0 0 1
> 3
< STORED
> delete tk
< DELETED
> timestamps maybe
< CLIENT_ERROR bad command line format
# A refused replay line takes its value with it: the 12 bytes
# "delete victim" must not run as a command.
> set victim 0 0 1
> v
< STORED
> replay k 0 -1 7000 13
> delete victim
< CLIENT_ERROR bad command line format
> get victim
< VALUE victim 0 1
< v
< END
