# memcached-differs: current memcached's error rules (1.6.4x); 1.6.18 answers ERROR for these and reads a refused data block as commands
# Recorded from current memcached (see docs/compat.md, "How the reference answers were recorded").
# A storage line without its length: the line alone is refused, what follows is a command.
> set k 0 0
> ab
< CLIENT_ERROR bad command line format
< ERROR
> set
< CLIENT_ERROR bad command line format
> cas k 0 0 x
< CLIENT_ERROR bad command line format
# With a length, a bad line takes its data block with it.
> cas k 0 0 2
> ab
< CLIENT_ERROR bad command line format
> set k x 0 2
> ab
< CLIENT_ERROR bad command line format
>> set kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk 0 0 5\r\nget k\r\n
< CLIENT_ERROR bad command line format
# noreply (the last token) hides the error; the block still goes.
> cas k 0 0 2 noreply
> ab
> mn
< MN
# Tokens after the length are ignored; noreply counts only as the last one.
> set k 0 0 2 3 4
> ab
< STORED
> set k 0 0 2 noreply x
> cd
< STORED
> set k 0 0 2 x noreply
> ef
> get k
< VALUE k 0 2
< ef
< END
# Item commands without their key.
> get
< CLIENT_ERROR bad command line format
> gets
< CLIENT_ERROR bad command line format
> gat 10
< CLIENT_ERROR bad command line format
> incr k
< CLIENT_ERROR bad command line format
> touch k
< CLIENT_ERROR bad command line format
> delete
< CLIENT_ERROR bad command line format
> mg
< CLIENT_ERROR bad command line format
> md
< CLIENT_ERROR bad command line format
> ma
< CLIENT_ERROR bad command line format
> ms
< CLIENT_ERROR bad command line format
> ms k
< CLIENT_ERROR bad command line format
> verbosity
< CLIENT_ERROR bad command line format
# Extra tokens after what a command reads are ignored.
> delete k 5
< DELETED
> delete k 0 1
< NOT_FOUND
> incr k 1 2 3
< NOT_FOUND
> touch k 1 2 3
< NOT_FOUND
> verbosity 1 2 3
< OK
> flush_all 0 0 0
< OK
> flush_all 0 x noreply
# A request under four bytes, newline included, is a bad line.
>> \r\n
< CLIENT_ERROR bad command line format
>> a\r\n
< CLIENT_ERROR bad command line format
>> mn\n
< CLIENT_ERROR bad command line format
>> ab\r\n
< ERROR
# slabs automove window out of range (1.6.18: bad command line format).
> slabs automove window 1
< CLIENT_ERROR automove window too low or too high
> slabs automove window 3
< OK
# A bad data chunk under noreply is silent; the stray LF is a line under four bytes.
>> set x 0 0 1 noreply\r\nab\r\n
< CLIENT_ERROR bad command line format
# shutdown without -A.
> shutdown
< SERVER_ERROR: shutdown not enabled
> shutdown bogus
< SERVER_ERROR: shutdown not enabled
> mn
< MN
