# slabs and an HTTP request line, as memcached answers them (1.6.18 and current agree).
> slabs automove 1
< OK
> slabs automove 0
< OK
> slabs automove 9
< ERROR
> slabs automove x
< CLIENT_ERROR bad command line format
> slabs automove
< ERROR
> slabs automove window x
< CLIENT_ERROR bad command line format
> slabs automove ratio x
< ERROR
> slabs automove ratio 0.5
< OK
> slabs bogus
< ERROR
> slabs
< ERROR
> slabs reassign x 2
< CLIENT_ERROR bad command line format
# An HTTP request line (a browser, a load balancer's health check): memcached hangs up.
> GET / HTTP/1.0
@close
