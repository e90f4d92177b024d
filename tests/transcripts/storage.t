# Storage commands and their replies (memcached protocol.txt, "Storage commands").
> set foo 5 0 3
> bar
< STORED
> get foo
< VALUE foo 5 3
< bar
< END
> add foo 0 0 1
> x
< NOT_STORED
> add new 0 0 1
> x
< STORED
> replace missing 0 0 1
> x
< NOT_STORED
> replace foo 7 0 3
> baz
< STORED
> append foo 0 0 2
> !!
< STORED
> prepend foo 0 0 2
> <<
< STORED
> get foo
< VALUE foo 7 7
< <<baz!!
< END
> append missing 0 0 1
> x
< NOT_STORED
# Binary-safe values: CR and LF inside the block.
>> set bin 0 0 4\r\na\r\nb\r\n
< STORED
>> get bin\r\n
< VALUE bin 0 4
< a
< b
< END
# Zero-length value.
> set empty 0 0 0
>
< STORED
> get empty
< VALUE empty 0 0
<
< END
# Flags are 32-bit.
> set f 4294967295 0 1
> x
< STORED
> get f
< VALUE f 4294967295 1
< x
< END
