//! `ClientBuilder::cluster` against a real 3-node replicated cluster: the
//! client finds the leader from the cluster map, sends its requests there,
//! and after kill -9 of the leader follows the new one. Every reply it
//! gives is right or an error; every acknowledged write reads back.

use std::time::{Duration, Instant};

use recall_client::{Client, StoreStatus};
use recall_testkit::cluster::{map_lines, Cluster, DEADLINE};

#[test]
fn the_client_follows_the_leader_through_a_kill_9() {
    let mut c = Cluster::start(3);
    let leader = c.leader();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let client = Client::builder()
        .cluster(true)
        .server(&c.clients[0].to_string())
        .server(&c.clients[1].to_string())
        .server(&c.clients[2].to_string())
        .request_timeout(Duration::from_secs(5))
        // A dead node is retried soon: it may be the only one left to ask.
        .retry_backoff(Duration::from_millis(100), Duration::from_millis(500))
        .build()
        .expect("client");
    let mut acked = Vec::new();
    rt.block_on(async {
        assert_eq!(client.set("first", "1", 0, 0).await.expect("set"), StoreStatus::Stored);
        acked.push(0);
        // The first request asked for the map: requests now go to the leader.
        assert_eq!(client.server_for("any").expect("routed").as_ref(), c.clients[leader].to_string());
        for i in 1..10 {
            assert_eq!(client.set(format!("k{i}"), format!("v{i}"), 0, 0).await.expect("set"), StoreStatus::Stored);
            acked.push(i);
        }
    });

    c.kill9(leader);
    let start = Instant::now();
    let mut i = 10;
    let new = rt.block_on(async {
        loop {
            assert!(start.elapsed() < DEADLINE, "no write stored after the kill");
            match client.set(format!("k{i}"), format!("v{i}"), 0, 0).await {
                Ok(StoreStatus::Stored) => {
                    acked.push(i);
                    break;
                }
                Ok(other) => panic!("set k{i}: {other:?}"),
                // Unknown outcome, or no leader yet: a clear error.
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
            i += 1;
        }
        client.server_for("any").expect("routed")
    });
    let new_leader = c.leader();
    assert_ne!(new_leader, leader);
    assert_eq!(new.as_ref(), c.clients[new_leader].to_string(), "the client follows the new leader");
    rt.block_on(async {
        for k in acked {
            let (key, want) =
                if k == 0 { ("first".to_string(), "1".to_string()) } else { (format!("k{k}"), format!("v{k}")) };
            let got = client.get(&key).await.expect("get").expect("an acknowledged write");
            assert_eq!(got.value, want.as_bytes(), "{key}");
        }
    });
}

/// With four groups, the client sends each key to its group's leader (the
/// leaders spread over the three nodes), and a multi-key get across groups
/// is split per leader.
#[test]
fn with_several_groups_each_key_goes_to_its_group_s_leader() {
    use recall_proto::cluster::{group_of_slot, slot_of, ClusterMap};
    let c = Cluster::start_with_args(3, &[], &["--cluster-groups", "4"]);
    // Wait for the leaders to spread: group g's on node g mod 3 + 1.
    let start = Instant::now();
    let spread = |m: &ClusterMap| m.groups.iter().enumerate().all(|(g, l)| l.leader == Some(g as u64 % 3 + 1));
    loop {
        let m = map_lines(c.clients[0]).and_then(|l| ClusterMap::parse(l.iter().map(|l| l.as_bytes())).ok());
        if m.as_ref().is_some_and(|m| m.groups.len() == 4 && spread(m)) {
            break;
        }
        assert!(start.elapsed() < DEADLINE, "the leaders did not spread: {m:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let mut b = Client::builder().cluster(true).request_timeout(Duration::from_secs(5));
    for a in &c.clients {
        b = b.server(&a.to_string());
    }
    let client = b.build().expect("client");
    let keys: Vec<String> = (0..40).map(|i| format!("key{i}")).collect();
    rt.block_on(async {
        for k in &keys {
            assert_eq!(client.set(k, k, 0, 0).await.expect("set"), StoreStatus::Stored, "{k}");
        }
        // The first request asked for the map: each key goes to its group's
        // leader.
        for k in &keys {
            let g = group_of_slot(slot_of(k.as_bytes()), 4);
            let want = c.clients[g % 3].to_string();
            assert_eq!(client.server_for(k).expect("routed").as_ref(), want, "{k} of group {g}");
        }
        let got = client.get_multi(&keys).await.expect("get_multi");
        assert_eq!(got.len(), keys.len());
        for k in &keys {
            assert_eq!(got[k.as_bytes()].value, k.as_bytes(), "{k}");
        }
    });
}
