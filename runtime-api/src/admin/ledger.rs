//! The ledger read with the admin token: one conversation's (its calls in all and by
//! model, its sandbox's time, the state it is in now counted to this moment), and rollups
//! by team, user, key, model, conversation, day or a tag's value over a range of days.

use std::collections::BTreeMap;

use sandgate_proto::admin::v1::{
    GetConversationLedgerRequest, GetConversationLedgerResponse, LedgerGroup, LedgerMeasures,
    LedgerRollupRequest, LedgerRollupResponse, LedgerRow,
};
use sandgate_proto::error::{ErrorCode, ErrorDetail};
use sandgate_store::ledger::{
    ConversationOwner, EVERYTHING, LEDGER_RETENTION_DAYS, conversation_id, conversation_model,
    split_conversation_model, tag_id, tag_prefix,
};
use sandgate_store::orgs::date_of;
use sandgate_store::{LedgerScope, Measure, StoredSandbox, day_of};
use tonic::{Request, Response, Status};

use super::{RuntimeAdminService, store_failed};
use crate::sandboxes::ledger::{cost, so_far};
use crate::sandboxes::service::{status, timeline};
use sandgate_proto::sandboxes::v1::SandboxStatus;

/// Of a stored ConversationInfo, its title alone (the rest is skipped, not built).
#[derive(serde::Deserialize)]
struct Titled {
    title: Option<String>,
}

/// The days read when none are asked: the last 31 to today.
const DEFAULT_DAYS: u32 = 30;
/// A rollup page's rows when none is asked, and the most.
pub const DEFAULT_LEDGER_PAGE: u32 = 100;
pub const MAX_LEDGER_PAGE: u32 = 1000;

fn measures(counted: &BTreeMap<Measure, f64>) -> LedgerMeasures {
    let whole = |measure| {
        counted
            .get(&measure)
            .map_or(0, |value: &f64| value.round() as u64)
    };
    LedgerMeasures {
        spend: counted.get(&Measure::Spend).copied().unwrap_or(0.0),
        calls: whole(Measure::Calls),
        failed_calls: whole(Measure::FailedCalls),
        prompt_tokens: whole(Measure::PromptTokens),
        completion_tokens: whole(Measure::CompletionTokens),
        running_ms: whole(Measure::RunningMs),
        paused_ms: whole(Measure::PausedMs),
        events: whole(Measure::Events),
        webhooks: whole(Measure::Webhooks),
        cache_read_tokens: whole(Measure::CacheReadTokens),
        cache_write_tokens: whole(Measure::CacheWriteTokens),
        sandbox_cost: counted.get(&Measure::SandboxCost).copied().unwrap_or(0.0),
    }
}

fn bad(message: impl Into<String>) -> Status {
    ErrorDetail::new(ErrorCode::BadRequest, message).into()
}

impl RuntimeAdminService {
    /// The days `from..=to` asked, with the defaults, within what is kept (older days
    /// hold nothing); `from` after `to` is an empty range.
    fn days(&self, from: u32, to: u32) -> (u32, u32) {
        let today = day_of(self.clock.now_ms());
        let to = if to == 0 { today } else { to };
        let from = if from == 0 {
            to.saturating_sub(DEFAULT_DAYS)
        } else {
            from
        };
        (from.max(to.saturating_sub(LEDGER_RETENTION_DAYS)), to)
    }

    /// The sandbox of `conversation`: the one whose session it is, or the one linked to
    /// it (the app server names its sandboxes apart from their conversations).
    async fn sandbox_of(&self, conversation: &str) -> Result<Option<StoredSandbox>, Status> {
        let sandboxes = &self.store.sandboxes;
        if let Some(sandbox) = sandboxes
            .sandbox_for_session(conversation)
            .await
            .map_err(store_failed)?
        {
            return Ok(Some(sandbox));
        }
        let Some(session) = self
            .store
            .ledger
            .conversation_session(conversation)
            .await
            .map_err(store_failed)?
        else {
            return Ok(None);
        };
        sandboxes
            .sandbox_for_session(&session)
            .await
            .map_err(store_failed)
    }

    pub(super) async fn conversation_ledger(
        &self,
        request: Request<GetConversationLedgerRequest>,
    ) -> Result<Response<GetConversationLedgerResponse>, Status> {
        self.authorize(request.metadata())?;
        let request = request.into_inner();
        let (from, to) = self.days(request.from_day, request.to_day);
        let id = conversation_id(&request.conversation_id).into_owned();
        let ledger = &self.store.ledger;
        let mut total = ledger
            .ledger_of(
                LedgerScope::Conversation,
                std::slice::from_ref(&id),
                from,
                to,
            )
            .await
            .map_err(store_failed)?
            .remove(&id)
            .unwrap_or_default();
        // Its sandbox now; the state it is in, so far (counted in full once it leaves it).
        let now = self.clock.now_ms();
        let sandbox = self.sandbox_of(&id).await?;
        if let Some(record) = &sandbox
            && (from..=to).contains(&day_of(now))
            && let Some((measure, ms)) = so_far(record, now)
        {
            *total.entry(measure).or_default() += ms;
            *total.entry(Measure::SandboxCost).or_default() +=
                cost(record, measure, ms, self.sandbox_prices);
        }
        // Its models are those the gateway counted for it; their rows alone are read.
        let ids: Vec<String> = ledger
            .conversation_models(&id)
            .await
            .map_err(store_failed)?
            .iter()
            .map(|model| conversation_model(&id, model))
            .collect();
        let by_model = ledger
            .ledger_of(LedgerScope::ConversationModel, &ids, from, to)
            .await
            .map_err(store_failed)?
            .into_iter()
            .filter_map(|(key, counted)| {
                let (_, model) = split_conversation_model(&key)?;
                Some((model.to_owned(), measures(&counted)))
            })
            .collect();
        let owner = ledger
            .conversation_owners(std::slice::from_ref(&id))
            .await
            .map_err(store_failed)?
            .remove(&id)
            .unwrap_or_default();
        Ok(Response::new(GetConversationLedgerResponse {
            user_id: owner.user_id.unwrap_or_default(),
            team_id: owner.team_id.unwrap_or_default(),
            key_alias: owner.key_alias.unwrap_or_default(),
            total: Some(measures(&total)),
            by_model,
            sandbox_status: sandbox
                .as_ref()
                .map_or(SandboxStatus::Unspecified, |record| status(record.state))
                .into(),
            resource_factor: sandbox
                .as_ref()
                .and_then(|record| record.spec.resource_factor),
            start: sandbox.and_then(|record| record.timeline).map(timeline),
        }))
    }

    pub(super) async fn ledger_rollup(
        &self,
        request: Request<LedgerRollupRequest>,
    ) -> Result<Response<LedgerRollupResponse>, Status> {
        self.authorize(request.metadata())?;
        let request = request.into_inner();
        let scope = match request.group() {
            LedgerGroup::Team => LedgerScope::Team,
            LedgerGroup::User => LedgerScope::User,
            LedgerGroup::Key => LedgerScope::Key,
            LedgerGroup::Model => LedgerScope::Model,
            LedgerGroup::Conversation => LedgerScope::Conversation,
            LedgerGroup::Day => LedgerScope::Everything,
            LedgerGroup::Tag if request.tag.is_empty() => {
                return Err(bad("a rollup by tag names the tag's key (`tag`)"));
            }
            LedgerGroup::Tag => LedgerScope::Tag,
            LedgerGroup::Unspecified => {
                return Err(bad(
                    "a rollup is by team, user, key, model, conversation, day or tag",
                ));
            }
        };
        let (from, to) = self.days(request.from_day, request.to_day);
        if scope == LedgerScope::Everything {
            return self.by_day(from, to, &request.after, request.limit).await;
        }
        let limit = match request.limit {
            0 => DEFAULT_LEDGER_PAGE,
            limit => limit.min(MAX_LEDGER_PAGE),
        } as usize;
        // By tag, the rows are the key's values: ids within its prefix, shown without it.
        let (within, after) = match scope {
            LedgerScope::Tag if request.after.is_empty() => {
                (tag_prefix(&request.tag), String::new())
            }
            LedgerScope::Tag => (
                tag_prefix(&request.tag),
                tag_id(&request.tag, &request.after),
            ),
            _ => (String::new(), request.after),
        };
        let shown = |id: &str| id.strip_prefix(within.as_str()).unwrap_or(id).to_owned();
        let page = self
            .store
            .ledger
            .ledger_page(scope, from, to, &within, &after, limit)
            .await
            .map_err(store_failed)?;
        let mut rows: Vec<LedgerRow> = page
            .rows
            .iter()
            .map(|(id, counted)| LedgerRow {
                id: shown(id),
                measures: Some(measures(counted)),
                ..LedgerRow::default()
            })
            .collect();
        if scope == LedgerScope::Conversation {
            self.describe(&mut rows).await?;
        }
        Ok(Response::new(LedgerRollupResponse {
            rows,
            next: page.next.as_deref().map(shown).unwrap_or_default(),
            total_rows: page.total,
        }))
    }

    /// Each conversation's title, status and tags, from the catalog (one read for the
    /// page), and who its calls are billed to (one more): what an operator tells
    /// conversations apart by.
    async fn describe(&self, rows: &mut [LedgerRow]) -> Result<(), Status> {
        let conversations: Vec<String> = rows.iter().map(|row| row.id.clone()).collect();
        let ids: Vec<uuid::Uuid> = rows
            .iter()
            .filter_map(|row| uuid::Uuid::try_parse(&row.id).ok())
            .collect();
        // Both reads at once.
        let (owners, records) = tokio::join!(
            self.store.ledger.conversation_owners(&conversations),
            async {
                if ids.is_empty() {
                    return Ok(Vec::new());
                }
                self.store.conversations.get_many(&ids).await
            },
        );
        let mut owners = owners.map_err(store_failed)?;
        let by_id: std::collections::HashMap<String, _> = records
            .map_err(store_failed)?
            .into_iter()
            .map(|record| (record.id.simple().to_string(), record))
            .collect();
        for row in rows {
            let ConversationOwner {
                user_id,
                team_id,
                key_alias,
            } = owners.remove(&row.id).unwrap_or_default();
            row.user_id = user_id.unwrap_or_default();
            row.team_id = team_id.unwrap_or_default();
            row.key_alias = key_alias.unwrap_or_default();
            let Some(record) = by_id.get(&row.id) else {
                continue;
            };
            row.status = record.execution_status.clone();
            row.tags = record.tags.clone().into_iter().collect();
            row.title = serde_json::from_str::<Titled>(record.record.get())
                .ok()
                .and_then(|info| info.title)
                .unwrap_or_default();
        }
        Ok(())
    }

    /// The rollup by day: a row a day with something counted, its id the date, in order.
    async fn by_day(
        &self,
        from: u32,
        to: u32,
        after: &str,
        limit: u32,
    ) -> Result<Response<LedgerRollupResponse>, Status> {
        let limit = match limit {
            0 => DEFAULT_LEDGER_PAGE,
            limit => limit.min(MAX_LEDGER_PAGE),
        } as usize;
        let days: Vec<(String, BTreeMap<Measure, f64>)> = self
            .store
            .ledger
            .ledger_days(LedgerScope::Everything, EVERYTHING, from, to)
            .await
            .map_err(store_failed)?
            .into_iter()
            .map(|(day, counted)| (date_of(day), counted))
            .collect();
        let total_rows = days.len() as u64;
        let mut rows: Vec<LedgerRow> = days
            .into_iter()
            .filter(|(date, _)| after.is_empty() || date.as_str() > after)
            .take(limit + 1)
            .map(|(id, counted)| LedgerRow {
                id,
                measures: Some(measures(&counted)),
                ..LedgerRow::default()
            })
            .collect();
        let next = if rows.len() > limit {
            rows.truncate(limit);
            rows.last().map(|row| row.id.clone()).unwrap_or_default()
        } else {
            String::new()
        };
        Ok(Response::new(LedgerRollupResponse {
            rows,
            next,
            total_rows,
        }))
    }
}
