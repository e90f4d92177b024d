//! The blocking wrapper, for programs without an async runtime.
//!
//! ```sh
//! cargo run -p recall-client --example blocking -- 127.0.0.1:11211
//! ```

use recall_client::blocking::Client;

fn main() -> Result<(), recall_client::Error> {
    let server = std::env::args().nth(1).unwrap_or_else(|| "127.0.0.1:11211".into());
    let client = Client::new([server])?;
    client.set("example:blocking", "it works", 0, 60)?;
    let item = client.get("example:blocking")?;
    println!("{:?}", item.map(|i| String::from_utf8_lossy(&i.value).into_owned()));
    println!("deleted: {}", client.delete("example:blocking")?);
    Ok(())
}
