# Meta commands (protocol.txt "Meta Commands").
> ms mk 2 T0 F3
> hi
< HD
> mg mk v f s t
< VA 2 f3 s2 t-1
< hi
> mg mk k Oxyz
< HD kmk Oxyz
> mg missing v
< EN
> mg missing v q
> mn
< MN
> ms mk 1 MA
> !
< HD
> mg mk v
< VA 3
< hi!
> ms new 1 ME
> a
< HD
> ms new 1 ME
> a
< NS
> ms nope 1 MR
> a
< NS
> md mk
< HD
> md mk
< NF
> md mk q
> mn
< NF
< MN
> ms mk 1 q
> x
> md mk q
> mn
< MN
> ma cnt
< NF
> ma cnt N0 J10 v
< VA 2
< 10
> ma cnt v
< VA 2
< 11
> ma cnt MD D20 v
< VA 1
< 0
> mg mk v v
< CLIENT_ERROR duplicate flag
> mg mk [
< CLIENT_ERROR invalid flag
> me missing
< EN
