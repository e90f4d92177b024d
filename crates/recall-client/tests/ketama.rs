//! Key placement against vectors recorded with pylibmc (libmemcached's
//! weighted ketama, and its unweighted one: pylibmc `{"ketama": True}`).
//! The files are regenerated and re-checked live by
//! `tests/python/test_ketama_vectors.py`.

use recall_client::ketama::{Continuum, Distribution, Node};
use recall_client::Client;
use serde_json::Value;

fn vectors() -> Value {
    let text = include_str!("data/ketama_vectors.json");
    serde_json::from_str(text).expect("vector file is JSON")
}

/// The servers a recorded set marked dead (pylibmc's remove_failed).
fn dead(set: &Value) -> Vec<usize> {
    set["dead"]
        .as_array()
        .map(|d| d.iter().filter_map(|i| i.as_u64()).map(|i| i as usize).collect())
        .unwrap_or_default()
}

fn nodes(set: &Value) -> Vec<Node> {
    set["servers"]
        .as_array()
        .expect("servers")
        .iter()
        .map(|s| {
            Node::new(
                s["host"].as_str().expect("host"),
                s["port"].as_u64().expect("port") as u16,
                s["weight"].as_u64().expect("weight") as u32,
            )
        })
        .collect()
}

#[test]
fn continuum_matches_pylibmc_ketama_weighted() {
    let v = vectors();
    assert_eq!(v["behaviors"]["ketama_weighted"], Value::Bool(true));
    let sets = v["sets"].as_array().expect("sets");
    assert!(sets.len() >= 4);
    assert!(sets.iter().any(|s| !s["dead"].is_null()), "a remove_failed set is recorded");
    for set in sets {
        let nodes = nodes(set);
        // A set with dead servers was recorded with pylibmc's remove_failed:
        // the continuum over the live servers only.
        let dead = dead(set);
        let c = Continuum::build(&nodes, |i| !dead.contains(&i));
        let placement = set["placement"].as_object().expect("placement");
        assert!(placement.len() >= 1000, "{} keys", placement.len());
        let wrong: Vec<_> = placement
            .iter()
            .filter(|(k, want)| c.locate(k.as_bytes()) != want.as_u64().map(|w| w as usize))
            .map(|(k, _)| k.clone())
            .collect();
        assert!(
            wrong.is_empty(),
            "{}: {} of {} keys misplaced, e.g. {:?}",
            set["name"],
            wrong.len(),
            placement.len(),
            &wrong[..wrong.len().min(5)]
        );
    }
}

#[test]
fn client_routes_like_the_vectors() {
    // The same through the public client API (server specs as strings,
    // weights as pylibmc writes them: host:port:weight).
    let v = vectors();
    for set in v["sets"].as_array().expect("sets").iter().filter(|s| s["dead"].is_null()) {
        let specs: Vec<String> = set["servers"]
            .as_array()
            .expect("servers")
            .iter()
            .map(|s| format!("{}:{}:{}", s["host"].as_str().unwrap_or(""), s["port"], s["weight"]))
            .collect();
        let client = Client::new(&specs).expect("client");
        let names = client.servers();
        for (key, want) in set["placement"].as_object().expect("placement") {
            let want = want.as_u64().expect("index") as usize;
            assert_eq!(client.server_for(key).expect("route"), names[want], "{key}");
        }
    }
}

/// pylibmc's `{"ketama": True}` (and with `"hash": "md5"`): recall's
/// `Distribution::Ketama` (`KetamaMd5`), key for key, with and without a
/// removed server; and through the client's routing.
#[test]
fn unweighted_continuum_matches_pylibmc_ketama() {
    let v: Value = serde_json::from_str(include_str!("data/ketama_unweighted_vectors.json")).expect("JSON");
    let dists = v["distributions"].as_object().expect("distributions");
    assert_eq!(dists.len(), 2);
    for (name, d) in dists {
        let dist: Distribution = name.parse().expect("a distribution recall knows");
        let sets = d["sets"].as_array().expect("sets");
        assert!(sets.iter().any(|s| !s["dead"].is_null()), "a remove_failed set is recorded");
        for set in sets {
            let nodes = nodes(set);
            let dead = dead(set);
            let c = Continuum::build_with(dist, &nodes, |i| !dead.contains(&i));
            let weighted = Continuum::build(&nodes, |i| !dead.contains(&i));
            let placement = set["placement"].as_object().expect("placement");
            assert!(placement.len() >= 1000);
            let want = |w: &Value| w.as_u64().map(|w| w as usize);
            let wrong: Vec<&String> =
                placement.iter().filter(|(k, w)| c.locate(k.as_bytes()) != want(w)).map(|(k, _)| k).collect();
            assert!(
                wrong.is_empty(),
                "{name}, {}: {} keys misplaced, e.g. {:?}",
                set["name"],
                wrong.len(),
                &wrong[..wrong.len().min(5)]
            );
            // The weighted continuum places many keys elsewhere: the two
            // are really different, and the vectors tell them apart.
            let differ = placement.iter().filter(|(k, w)| weighted.locate(k.as_bytes()) != want(w)).count();
            assert!(differ > placement.len() / 10, "{name}: only {differ} keys differ from the weighted continuum");
            if dead.is_empty() {
                let specs: Vec<String> = set["servers"]
                    .as_array()
                    .expect("servers")
                    .iter()
                    .map(|s| format!("{}:{}", s["host"].as_str().unwrap_or(""), s["port"]))
                    .collect();
                let client = specs
                    .iter()
                    .fold(Client::builder(), |b, s| b.server(s))
                    .distribution(dist)
                    .build()
                    .expect("client");
                let names = client.servers();
                for (key, w) in placement {
                    assert_eq!(client.server_for(key).expect("route"), names[want(w).expect("index")], "{name} {key}");
                }
            }
        }
    }
}
