# gets returns a CAS unique; cas only stores when it still matches.
> set k 0 0 1
> a
< STORED
> gets k
< VALUE k 0 1 {n}
< a
< END
> cas k 0 0 1 999999999
> b
< EXISTS
> cas missing 0 0 1 1
> b
< NOT_FOUND
> cas k 0 0 1 0
> b
< EXISTS
