//! The model gateway's teams, users and spend counters in every store: writes are
//! compare-and-swap on a record's version, and counters added by racing writers count
//! every amount exactly once, in all and per day.

use sandgate_store::{SpendCount, SpendScope, StoredTeam, StoredUser, TeamMember};

use crate::common::Backend;

use super::*;

async fn teams_and_users_are_written_compare_and_swap(backend: Backend) {
    let store = open(&backend).await;
    let team = StoredTeam {
        team_id: "org-1".into(),
        max_budget: Some(3.0),
        members: vec![TeamMember {
            user_id: "u1".into(),
            role: "user".into(),
            max_budget_in_team: Some(3.0),
        }],
        ..StoredTeam::default()
    };
    assert!(store.orgs.put_team(&team, 0).await.expect("create"));
    // A second create, and a write from a stale version, lose.
    assert!(!store.orgs.put_team(&team, 0).await.expect("create again"));
    let stored = store
        .orgs
        .get_team("org-1")
        .await
        .expect("read")
        .expect("the team");
    assert_eq!((stored.version, &stored.members), (1, &team.members));
    let mut changed = stored.clone();
    changed.blocked = true;
    assert!(store.orgs.put_team(&changed, 1).await.expect("swap"));
    assert!(!store.orgs.put_team(&stored, 1).await.expect("stale swap"));
    let stored = store
        .orgs
        .get_team("org-1")
        .await
        .expect("read")
        .expect("the team");
    assert!(stored.blocked && stored.version == 2);

    let user = StoredUser {
        user_id: "u1".into(),
        teams: vec!["org-1".into()],
        ..StoredUser::default()
    };
    assert!(store.orgs.put_user(&user, 0).await.expect("create"));
    assert!(!store.orgs.put_user(&user, 0).await.expect("create again"));
    assert_eq!(
        store
            .orgs
            .delete_users(&["u1".into(), "u2".into()])
            .await
            .expect("delete"),
        ["u1"]
    );
    assert_eq!(store.orgs.get_user("u1").await.expect("read"), None);
    assert_eq!(
        store
            .orgs
            .delete_teams(&["org-1".into()])
            .await
            .expect("delete"),
        ["org-1"]
    );
    assert_eq!(store.orgs.get_team("org-1").await.expect("read"), None);
}

async fn spend_counters_count_every_amount_once(backend: Backend) {
    let store = open(&backend).await;
    let count = |day: u32, scope: SpendScope, id: &str, amount: f64| SpendCount {
        day,
        scope,
        id: id.into(),
        amount,
    };
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("time")
        .as_millis() as i64;
    let today = sandgate_store::day_of(now_ms);
    let yesterday = today - 1;
    // 40 writers at once, each a batch touching a team, a user, a session and a model.
    let writers: Vec<_> = (0..40)
        .map(|index| {
            let store = store.clone();
            let batch = vec![
                count(yesterday + index % 2, SpendScope::Team, "org-1", 0.25),
                count(yesterday + index % 2, SpendScope::User, "u1", 0.5),
                count(today, SpendScope::Session, "conversation", 1.0),
                count(today, SpendScope::Model, "gpt", 0.125),
            ];
            tokio::spawn(async move { store.orgs.add_spend(&batch).await })
        })
        .collect();
    for writer in writers {
        writer.await.expect("joined").expect("added");
    }
    let totals = store
        .orgs
        .spend_totals(&[
            (SpendScope::Team, "org-1".into()),
            (SpendScope::User, "u1".into()),
            (SpendScope::Model, "gpt".into()),
            (SpendScope::Key, "never".into()),
        ])
        .await
        .expect("totals");
    assert_eq!(totals, [10.0, 20.0, 5.0, 0.0]);
    let days = store
        .orgs
        .spend_by_day(SpendScope::Team, yesterday - 1, today + 1)
        .await
        .expect("days");
    let days: Vec<(u32, &str, f64)> = days
        .iter()
        .map(|day| (day.day, day.id.as_str(), day.amount))
        .collect();
    assert_eq!(days, [(yesterday, "org-1", 5.0), (today, "org-1", 5.0)]);
    let sessions = store
        .orgs
        .spend_by_day(SpendScope::Session, today, today)
        .await
        .expect("sessions");
    assert_eq!(sessions.len(), 1);
    assert_eq!(sessions[0].amount, 40.0);
}

crate::on_both_backends!(
    teams_and_users_are_written_compare_and_swap,
    spend_counters_count_every_amount_once,
);
