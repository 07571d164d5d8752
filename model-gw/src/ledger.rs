//! What a finished call adds to the ledger: one call (failed or not), its tokens and its
//! spend, to its conversation (and that conversation's model), team, user, key and model,
//! on the day it started; and who a conversation's calls are billed to.

use std::collections::HashMap;

use sandgate_store::ledger::{
    ConversationOwner, EVERYTHING, LedgerSums, conversation_id, conversation_model,
};
use sandgate_store::{LedgerScope, Measure, SpendLogEntry, day_of};

/// Adds `entry`'s call to `sums`.
pub(crate) fn count(sums: &mut LedgerSums, entry: &SpendLogEntry) {
    let day = day_of(entry.started_at_ms);
    let failed = !(200..300).contains(&entry.status);
    let measures = [
        (Measure::Calls, 1.0),
        (Measure::FailedCalls, if failed { 1.0 } else { 0.0 }),
        (
            Measure::PromptTokens,
            entry.prompt_tokens.unwrap_or(0) as f64,
        ),
        (
            Measure::CompletionTokens,
            entry.completion_tokens.unwrap_or(0) as f64,
        ),
        (
            Measure::CacheReadTokens,
            entry.cache_read_tokens.unwrap_or(0) as f64,
        ),
        (
            Measure::CacheWriteTokens,
            entry.cache_write_tokens.unwrap_or(0) as f64,
        ),
        (
            Measure::Spend,
            entry.spend.filter(|spend| spend.is_finite()).unwrap_or(0.0),
        ),
    ];
    // The conversation as the runtime API names it (a UUID as its 32 hex digits).
    let conversation = entry.session_id.as_deref().map(conversation_id);
    let conversation_model = conversation
        .as_deref()
        .map(|conversation| conversation_model(conversation, &entry.model));
    let scopes = [
        (
            LedgerScope::ConversationModel,
            conversation_model.as_deref(),
        ),
        (LedgerScope::Conversation, conversation.as_deref()),
        (LedgerScope::Team, entry.team_id.as_deref()),
        (LedgerScope::User, entry.key_user_id.as_deref()),
        (LedgerScope::Key, entry.api_key.as_deref()),
        (LedgerScope::Model, Some(entry.model.as_str())),
        (LedgerScope::Everything, Some(EVERYTHING)),
    ];
    let measures: Vec<(Measure, f64)> = measures
        .into_iter()
        .filter(|(_, amount)| *amount > 0.0)
        .collect();
    for (scope, id) in scopes {
        if let Some(id) = id {
            sums.add_measures(day, scope, id, &measures);
        }
    }
}

/// Notes in `owners` who `entry`'s conversation is billed to, when a virtual key made the
/// call and none is noted yet: the key's user, team and alias.
pub(crate) fn own(owners: &mut HashMap<String, ConversationOwner>, entry: &SpendLogEntry) {
    let (Some(session), Some(_)) = (entry.session_id.as_deref(), entry.api_key.as_ref()) else {
        return;
    };
    owners
        .entry(conversation_id(session).into_owned())
        .or_insert_with(|| ConversationOwner {
            user_id: entry.key_user_id.clone(),
            team_id: entry.team_id.clone(),
            key_alias: entry.key_alias.clone(),
        });
}
