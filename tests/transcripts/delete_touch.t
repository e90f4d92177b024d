> set k 0 0 1
> v
< STORED
> delete k
< DELETED
> delete k
< NOT_FOUND
> delete k 0
< NOT_FOUND
> touch k 10
< NOT_FOUND
> set k 0 0 1
> v
< STORED
> touch k 10
< TOUCHED
> touch k abc
< CLIENT_ERROR invalid exptime argument
> delete k noreply
> get k
< END
