//! The typed API against one server.
//!
//! ```sh
//! cargo run -p recall-server --bin recalld -- -p 11211 &
//! cargo run -p recall-client --example basic -- 127.0.0.1:11211
//! ```

use recall_client::{Client, Error, MetaArith, MetaGet, MetaSet, StoreStatus};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    let server = std::env::args().nth(1).unwrap_or_else(|| "127.0.0.1:11211".into());
    let client = Client::new([server])?;

    // Classic commands: typed results, a miss is `None`, not an error.
    client.set("example:greeting", "hello", 0, 60).await?;
    let item = client.gets("example:greeting").await?.expect("just stored");
    println!("get -> {:?} (cas {:?})", String::from_utf8_lossy(&item.value), item.cas);

    // Optimistic update with the CAS we read.
    match client.cas("example:greeting", "hello, world", 0, 60, item.cas.unwrap_or_default()).await? {
        StoreStatus::Stored => println!("cas -> stored"),
        other => println!("cas -> lost the race ({other:?})"),
    }
    println!("miss -> {:?}", client.get("example:nothing-here").await?);

    // Counters.
    client.set("example:visits", "0", 0, 0).await?;
    println!("incr -> {:?}", client.incr("example:visits", 5).await?);

    // Errors are typed: incrementing text is the server's CLIENT_ERROR.
    if let Err(Error::Client { message, .. }) = client.incr("example:greeting", 1).await {
        println!("incr on text -> CLIENT_ERROR {message}");
    }

    // Meta commands through builders: value, CAS and TTL left in one call.
    let r = client.meta_get("example:greeting", &MetaGet::new().value().cas().ttl()).await?;
    println!("mg -> {:?} value={:?} cas={:?} ttl={:?}", r.status, r.value.map(String::from_utf8), r.ret.cas, r.ret.ttl);
    let r = client.meta_set("example:meta", "v", &MetaSet::new().ttl(30).return_cas()).await?;
    println!("ms -> {:?} cas={:?}", r.status, r.ret.cas);
    let r = client.meta_arith("example:ctr", &MetaArith::new().vivify(0).initial(100).value()).await?;
    println!("ma -> {:?}", r.value.map(String::from_utf8));

    for (server, version) in client.version().await {
        println!("{server} runs {}", version?);
    }
    Ok(())
}
