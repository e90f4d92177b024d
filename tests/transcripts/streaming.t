# memcached-differs: sset/sget are recall's streaming commands (seed 004), see docs/compat.md
# Frames: 2-byte big-endian length, body; a zero-length frame and CRLF end the value.
>> sset k 5 0\r\n\x00\x03abc\x00\x02de\x00\x00\r\n
< STORED
> get k
< VALUE k 5 5
< abcde
< END
> sget k missing
< SVALUE k 5
< \x00\x05abcde\x00\x00
< END
> sgets k
< SVALUE k 5 {n}
< \x00\x05abcde\x00\x00
< END
# An empty value is one tail frame.
>> sset empty 0 0\r\n\x00\x00\r\n
< STORED
> get empty
< VALUE empty 0 0
<
< END
# Plain set, streamed get.
> set p 1 0 2
> hi
< STORED
> sget p
< SVALUE p 1
< \x00\x02hi\x00\x00
< END
# sadd / sreplace / sappend / sprepend / scas / noreply
>> sadd k 0 0\r\n\x00\x01x\x00\x00\r\n
< NOT_STORED
>> sreplace nope 0 0\r\n\x00\x01x\x00\x00\r\n
< NOT_STORED
>> sappend k 0 0\r\n\x00\x01!\x00\x00\r\n
< STORED
>> sprepend k 0 0\r\n\x00\x01<\x00\x00\r\n
< STORED
> get k
< VALUE k 5 7
< <abcde!
< END
>> scas k 0 0 1\r\n\x00\x01x\x00\x00\r\n
< EXISTS
>> sset q 0 0 noreply\r\n\x00\x01q\x00\x00\r\n
> get q
< VALUE q 0 1
< q
< END
# A tail frame not followed by CRLF is a bad data chunk; the connection recovers.
>> sset bad 0 0\r\n\x00\x01x\x00\x00XY
< CLIENT_ERROR bad data chunk
> get bad
< END
