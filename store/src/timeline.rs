//! A start's timeline: where the seconds of one start of a session went, from the claim
//! of a warm sandbox (or the create of a cold one) to the first LLM call of its
//! conversation. Each phase is written once, by the job that sees it (the start, the
//! refresh that first sees the sandbox running, the probe of its agent-server, the
//! webhook, the model gateway), on the sandbox's record, and observed in the histogram
//! `sandgate_sandbox_start_phase_seconds{phase, launch}` by the process that wrote it.

use serde::{Deserialize, Serialize};

/// The histogram of the phases, seconds since the start.
pub const PHASE_HISTOGRAM: &str = "sandgate_sandbox_start_phase_seconds";

/// Whether a start claimed a warm sandbox or created one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Launch {
    Warm,
    Cold,
}

impl Launch {
    pub fn name(self) -> &'static str {
        match self {
            Self::Warm => "warm",
            Self::Cold => "cold",
        }
    }
}

/// A phase after the start, in the order a start normally goes through them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Sandgate first saw it running (a warm claim of a running sandbox: the claim).
    Running,
    /// Its agent-server answered: `/api/init` of a personalised claim, else `GET /alive`.
    Alive,
    /// The first conversation webhook or event batch it sent.
    FirstWebhook,
    /// The first model gateway call carrying its session.
    FirstLlmCall,
}

impl Phase {
    /// Its `phase` label.
    pub fn name(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Alive => "alive",
            Self::FirstWebhook => "first_webhook",
            Self::FirstLlmCall => "first_llm_call",
        }
    }
}

/// The timeline of the start that claimed or created a sandbox: milliseconds since the
/// epoch, each phase absent until seen. A resume keeps it: it times the start.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Timeline {
    pub launch: Launch,
    /// Why the start was cold (`no_pool`, `pool_empty`, `init_failed`, or the first
    /// field that differed from the nearest pool); `None` for a warm one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cold_reason: Option<String>,
    /// The claim of the warm sandbox, or the cold create.
    pub started_at_ms: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub running_at_ms: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alive_at_ms: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_webhook_at_ms: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_llm_call_at_ms: Option<i64>,
}

impl Timeline {
    /// A start at `started_at_ms`.
    pub fn new(launch: Launch, cold_reason: Option<String>, started_at_ms: i64) -> Self {
        Self {
            launch,
            cold_reason,
            started_at_ms,
            running_at_ms: None,
            alive_at_ms: None,
            first_webhook_at_ms: None,
            first_llm_call_at_ms: None,
        }
    }

    fn slot(&mut self, phase: Phase) -> &mut Option<i64> {
        match phase {
            Phase::Running => &mut self.running_at_ms,
            Phase::Alive => &mut self.alive_at_ms,
            Phase::FirstWebhook => &mut self.first_webhook_at_ms,
            Phase::FirstLlmCall => &mut self.first_llm_call_at_ms,
        }
    }

    /// When `phase` was seen, if it was.
    pub fn at(&self, phase: Phase) -> Option<i64> {
        match phase {
            Phase::Running => self.running_at_ms,
            Phase::Alive => self.alive_at_ms,
            Phase::FirstWebhook => self.first_webhook_at_ms,
            Phase::FirstLlmCall => self.first_llm_call_at_ms,
        }
    }

    /// Records `phase` at `at_ms` unless it was seen already; `true`: recorded now. A
    /// phase is never earlier than the start: clocks of replicas differ by a little.
    pub fn set(&mut self, phase: Phase, at_ms: i64) -> bool {
        let started = self.started_at_ms;
        let slot = self.slot(phase);
        if slot.is_some() {
            return false;
        }
        *slot = Some(at_ms.max(started));
        true
    }

    /// Observes `phase`, as recorded, in the histogram.
    pub fn observe(&self, phase: Phase) {
        if let Some(at) = self.at(phase) {
            let seconds = (at - self.started_at_ms).max(0) as f64 / 1000.0;
            metrics::histogram!(
                PHASE_HISTOGRAM,
                "phase" => phase.name(),
                "launch" => self.launch.name(),
            )
            .record(seconds);
        }
    }
}

/// Registers the phase histogram with its help text.
pub fn describe_metrics() {
    metrics::describe_histogram!(
        PHASE_HISTOGRAM,
        metrics::Unit::Seconds,
        "seconds from a start (the claim of a warm sandbox, or the cold create) to each phase \
         the sandbox went through: running (first seen running), alive (its agent-server \
         answered), first_webhook, first_llm_call; by launch (warm or cold)"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_phase_is_recorded_once_and_never_before_the_start() {
        let mut timeline = Timeline::new(Launch::Cold, Some("pool_empty".into()), 1_000);
        assert!(timeline.set(Phase::Running, 1_500));
        assert!(!timeline.set(Phase::Running, 2_000));
        assert_eq!(timeline.running_at_ms, Some(1_500));
        assert!(timeline.set(Phase::Alive, 900));
        assert_eq!(timeline.alive_at_ms, Some(1_000));
    }

    #[test]
    fn an_empty_phase_is_not_serialised_and_old_shapes_load() {
        let timeline = Timeline::new(Launch::Warm, None, 7);
        let json = serde_json::to_value(&timeline).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"launch": "warm", "started_at_ms": 7})
        );
        let back: Timeline = serde_json::from_value(json).unwrap();
        assert_eq!(back, timeline);
    }
}
