//! LiteLLM's `/team/list` and `/user/list` (issue 52: the console lists every team and
//! user, not only those its keys name): every team by id with the spend its budget
//! judges, or a member's; a page of the users with LiteLLM's paging fields.

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::common::Backend;
use crate::gateway_keys::{gateway, post, send};
use crate::model_gateway::MASTER_KEY;

async fn get(gateway: &crate::gateway_keys::Gateway, path: &str) -> (StatusCode, Value) {
    let sandgate = &gateway.sandgate;
    send(
        sandgate
            .client
            .get(sandgate.url(path))
            .bearer_auth(MASTER_KEY),
    )
    .await
}

fn ids(list: &Value, field: &str) -> Vec<String> {
    list.as_array()
        .expect("a list")
        .iter()
        .map(|item| item[field].as_str().expect("an id").to_owned())
        .collect()
}

async fn lists(backend: Backend) {
    let gateway = gateway(&backend).await;
    let sandgate = &gateway.sandgate;
    for (team, budget, members) in [
        ("team-b", 10.0, vec!["user-1"]),
        ("team-a", 5.0, vec!["user-1", "user-2"]),
        ("team-c", 1.0, vec![]),
    ] {
        let (status, body) = send(post(
            sandgate,
            "/team/new",
            MASTER_KEY,
            &json!({"team_id": team, "max_budget": budget}),
        ))
        .await;
        assert_eq!(status, 200, "{body}");
        for user in members {
            let (status, body) = send(post(
                sandgate,
                "/team/member_add",
                MASTER_KEY,
                &json!({"team_id": team, "member": {"user_id": user, "role": "user"}}),
            ))
            .await;
            assert_eq!(status, 200, "{body}");
        }
    }
    let (status, body) = send(post(
        sandgate,
        "/user/new",
        MASTER_KEY,
        &json!({"user_id": "user-3", "max_budget": 2.0}),
    ))
    .await;
    assert_eq!(status, 200, "{body}");
    // A user's spend set: the list shows what its budget judges.
    let (status, body) = send(post(
        sandgate,
        "/user/update",
        MASTER_KEY,
        &json!({"user_id": "user-3", "spend": 1.5}),
    ))
    .await;
    assert_eq!(status, 200, "{body}");

    let (status, teams) = get(&gateway, "/team/list").await;
    assert_eq!(status, 200, "{teams}");
    assert_eq!(ids(&teams, "team_id"), ["team-a", "team-b", "team-c"]);
    assert_eq!(teams[0]["max_budget"], 5.0, "{teams}");
    assert_eq!(teams[0]["spend"], 0.0, "{teams}");
    assert_eq!(
        teams[0]["members_with_roles"].as_array().map(Vec::len),
        Some(2)
    );
    let (_, mine) = get(&gateway, "/team/list?user_id=user-2").await;
    assert_eq!(ids(&mine, "team_id"), ["team-a"]);
    let (_, none) = get(&gateway, "/team/list?user_id=nobody").await;
    assert_eq!(none, json!([]));

    let (status, page) = get(&gateway, "/user/list?page_size=2").await;
    assert_eq!(status, 200, "{page}");
    assert_eq!(ids(&page["users"], "user_id"), ["user-1", "user-2"]);
    assert_eq!(
        (
            &page["total"],
            &page["page"],
            &page["page_size"],
            &page["total_pages"]
        ),
        (&json!(3), &json!(1), &json!(2), &json!(2)),
        "{page}"
    );
    let (_, second) = get(&gateway, "/user/list?page_size=2&page=2").await;
    assert_eq!(ids(&second["users"], "user_id"), ["user-3"]);
    assert_eq!(second["users"][0]["spend"], 1.5, "{second}");
    assert_eq!(second["users"][0]["max_budget"], 2.0, "{second}");
    let (_, past) = get(&gateway, "/user/list?page=9").await;
    assert_eq!(past["users"], json!([]), "{past}");
    assert_eq!(past["total"], 3, "{past}");
    let (_, chosen) = get(&gateway, "/user/list?user_ids=user-3,user-1").await;
    assert_eq!(ids(&chosen["users"], "user_id"), ["user-1", "user-3"]);
    // A page size past the most is the most; a page that is no whole number is refused.
    let (_, most) = get(&gateway, "/user/list?page_size=100000").await;
    assert_eq!(most["page_size"], 100, "{most}");
    for bad in ["page=0", "page=-1", "page_size=x", "page=1.5"] {
        let (status, refused) = get(&gateway, &format!("/user/list?{bad}")).await;
        assert_eq!(status, 400, "{bad}: {refused}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn teams_and_users_are_listed_on_the_embedded_store() {
    lists(Backend::embedded()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn teams_and_users_are_listed_on_redis() {
    lists(Backend::redis().await).await;
}
