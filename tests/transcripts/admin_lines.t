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
> lru
< ERROR
> lru bogus
< ERROR
> lru mode flat
< OK
> lru mode segmented
< OK
> lru mode x
< ERROR
> lru temp_ttl 60
< OK
> lru temp_ttl x
< ERROR
> lru tune 20 20 0.1 2
< OK
> lru tune 50 50 0.1 2
< ERROR hot and warm pcts must not exceed 80
> lru tune 20 20 0 2
< ERROR hot/warm age factors must be greater than 0
> lru tune 20 x 0.1 2
< ERROR
> version extra
< VERSION {*}
# refresh_certs without TLS (-Z), as memcached built with TLS answers it.
> refresh_certs
< Error TLS not enabled
# An HTTP request line (a browser, a load balancer's health check): memcached hangs up.
> GET / HTTP/1.0
@close
