//! The fast path for a body that validates: the walker of `validate`, step for step, over
//! the borrowed tree and without building errors.
//!
//! It only decides whether the body is accepted and redacts it exactly as `validate` does
//! (including what a union member that failed redacted before the next one matched). A body
//! it rejects, or meets something rare in (a hook that rewrites its input, a very wide
//! object), goes the `Value` way, which builds pydantic's errors; so errors come from one
//! place only. `tests::fast_path_agrees_with_the_value_path` holds the two paths together.

use std::borrow::Cow;

use super::REDACTED;
use super::borrowed::{self, Json};
use super::hooks::BeforeHook;
use super::hooks::after::{run_after, run_field};
use super::hooks::before::{
    TAG_VALUE_MAX_CHARS, is_no_secret_str, llm_defaults, pascal_to_snake, tag_key_is_valid,
};
use super::scalars;
use super::summary::{ConversationSummary, summarize};
use super::tree::{KindUnion, ModelId, Node, NodeId, StrFormat, TaggedUnion, Tree};
use super::validate::MAX_FIELDS;
use super::{canonical, datetime};

struct FastWalker<'t> {
    tree: &'t Tree,
    /// As `validate::Walker::union_depth`.
    union_depth: u32,
    /// Met something only the `Value` path handles: the result does not count.
    bail: bool,
}

fn redact(v: &mut Json<'_>) {
    if !v.is_null() {
        *v = Json::String(Cow::Borrowed(REDACTED));
    }
}

/// What a before-validator decided, as `hooks::before::Before` without the rewritten copy.
enum Before {
    Continue,
    /// Stop; `true` when the hook accepted.
    Stop(bool),
    Bail,
}

impl FastWalker<'_> {
    fn node(&mut self, id: NodeId, v: &mut Json<'_>) -> bool {
        if self.bail {
            return false;
        }
        let tree = self.tree;
        let checked = match tree.node(id) {
            Node::Any => Ok(()),
            Node::Null => return v.is_null(),
            Node::Str {
                min_len,
                format: StrFormat::Plain,
            } => scalars::check_str(&*v, *min_len),
            Node::Str {
                format: StrFormat::Uuid,
                ..
            } => scalars::check_uuid(&*v),
            Node::Str {
                format: StrFormat::DateTime,
                ..
            } => datetime::parse_datetime(&*v).map(|_| ()),
            Node::Int(bounds) => scalars::check_int(&*v, bounds),
            Node::Float(bounds) => scalars::check_float(&*v, bounds),
            Node::Bool => scalars::check_bool(&*v),
            Node::Literal { values, expected } | Node::Enum { values, expected } => {
                scalars::check_choice(&*v, values, expected, "")
            }
            Node::List {
                items,
                min_items,
                max_items,
                ..
            } => return self.list(*items, *min_items, *max_items, v),
            Node::Tuple { items } => return self.tuple(items, v),
            Node::Dict { values } => return self.dict(*values, v),
            Node::Model(m) => return self.model(*m, v),
            Node::KindUnion(k) => return self.kind_union(k, v),
            Node::TaggedUnion(t) => return self.tagged_union(t, v),
            Node::Nullable(inner) => return v.is_null() || self.node(*inner, v),
            Node::Union {
                members, secret, ..
            } => {
                let ok = self.union(members, v);
                if *secret {
                    redact(v);
                }
                return ok;
            }
            Node::Secret(inner) => {
                let ok = self.node(*inner, v);
                if ok || self.union_depth == 0 {
                    redact(v);
                }
                return ok;
            }
            Node::Before { hook, inner } => return self.before(*hook, *inner, v),
            Node::After { hook, inner } => {
                return self.node(*inner, v) && run_field(*hook, &*v).is_none();
            }
        };
        let ok = checked.is_ok();
        if ok && self.union_depth == 0 && !canonical::is_canonical(tree.node(id), &*v) {
            // Stored in another form than it was sent in: the `Value` path rewrites it.
            self.bail = true;
        }
        ok
    }

    fn scrub(&mut self, id: NodeId, v: &mut Json<'_>) {
        let depth = self.union_depth;
        self.union_depth = 0;
        self.node(id, v);
        self.union_depth = depth;
    }

    fn list(
        &mut self,
        items: Option<NodeId>,
        min: Option<usize>,
        max: Option<usize>,
        v: &mut Json<'_>,
    ) -> bool {
        let Json::Array(arr) = v else { return false };
        let mut ok = true;
        if let Some(items) = items {
            for item in arr.iter_mut() {
                ok &= self.node(items, item);
            }
        }
        let len = arr.len();
        ok && min.is_none_or(|min| len >= min) && max.is_none_or(|max| len <= max)
    }

    fn tuple(&mut self, items: &[NodeId], v: &mut Json<'_>) -> bool {
        let Json::Array(arr) = v else { return false };
        let mut ok = arr.len() == items.len();
        for (item, node) in arr.iter_mut().zip(items) {
            ok &= self.node(*node, item);
        }
        ok
    }

    fn dict(&mut self, values: Option<NodeId>, v: &mut Json<'_>) -> bool {
        let Json::Object(map) = v else { return false };
        let Some(values) = values else { return true };
        let mut ok = true;
        for (_, item) in map.iter_mut() {
            ok &= self.node(values, item);
        }
        ok
    }

    fn model(&mut self, id: ModelId, v: &mut Json<'_>) -> bool {
        let tree = self.tree;
        let model = tree.model(id);
        let Json::Object(map) = v else { return false };
        let mut ok = true;
        let mut seen = [0u64; MAX_FIELDS / 64];
        for (key, item) in map.iter_mut() {
            match model.keys.find(&model.fields, key) {
                Some(i) => {
                    seen[i / 64] |= 1 << (i % 64);
                    ok &= self.node(model.fields[i].node, item);
                }
                None if model.forbid_extra => ok = false,
                None => {}
            }
        }
        for (i, field) in model.fields.iter().enumerate() {
            if field.required && seen[i / 64] & (1 << (i % 64)) == 0 {
                ok = false;
            }
        }
        ok && model
            .after
            .is_none_or(|hook| run_after(hook, model, &*v).is_none())
    }

    fn kind_union(&mut self, k: &KindUnion, v: &mut Json<'_>) -> bool {
        let Json::Object(map) = v else { return false };
        if let Some(Json::String(kind)) = borrowed::get(map, "kind")
            && let Some((_, node)) = k.variants.iter().find(|(tag, _)| tag == kind)
        {
            return self.node(*node, v);
        }
        for (_, node) in k.variants.iter() {
            self.scrub(*node, v);
        }
        false
    }

    fn tagged_union(&mut self, t: &TaggedUnion, v: &mut Json<'_>) -> bool {
        let Json::Object(map) = v else { return false };
        if let Some(tag) = borrowed::get(map, &t.prop) {
            let Some(tag) = python_str(tag) else {
                self.bail = true;
                return false;
            };
            if let Some((_, node)) = t.variants.iter().find(|(v, _)| *v == tag) {
                return self.node(*node, v);
            }
        }
        for (_, node) in t.variants.iter() {
            self.scrub(*node, v);
        }
        false
    }

    fn union(&mut self, members: &[NodeId], v: &mut Json<'_>) -> bool {
        self.union_depth += 1;
        let ok = members.iter().any(|member| self.node(*member, v));
        self.union_depth -= 1;
        if !ok {
            for member in members {
                self.scrub(*member, v);
            }
        }
        ok
    }

    fn before(&mut self, hook: BeforeHook, inner: NodeId, v: &mut Json<'_>) -> bool {
        match before(hook, v) {
            Before::Continue => self.node(inner, v),
            Before::Stop(true) => true,
            Before::Stop(false) => {
                self.scrub(inner, v);
                false
            }
            Before::Bail => {
                self.bail = true;
                false
            }
        }
    }
}

/// `validate::python_str`, for the strings, numbers, booleans and null a tag can be.
fn python_str(v: &Json<'_>) -> Option<String> {
    Some(match v {
        Json::String(s) => s.to_string(),
        Json::Null => "None".into(),
        Json::Bool(true) => "True".into(),
        Json::Bool(false) => "False".into(),
        Json::Number(n) => serde_json::Value::Number(n.clone()).to_string(),
        Json::Array(_) | Json::Object(_) => return None,
    })
}

/// Python truthiness, as `hooks::before::truthy`.
fn truthy(v: &Json<'_>) -> bool {
    match v {
        Json::Null => false,
        Json::Bool(b) => *b,
        Json::Number(n) => n.as_f64().is_some_and(|f| f != 0.0),
        Json::String(s) => !s.is_empty(),
        Json::Array(a) => !a.is_empty(),
        Json::Object(o) => !o.is_empty(),
    }
}

/// `hooks::before::run_before`, deciding only whether the hook accepts.
fn before(hook: BeforeHook, v: &Json<'_>) -> Before {
    match hook {
        BeforeHook::LlmModelRequired => match v {
            Json::Object(obj) if !borrowed::get(obj, "model").is_some_and(truthy) => {
                Before::Stop(false)
            }
            // A default it fills in is left to the `Value` path.
            Json::Object(obj) => {
                let model = borrowed::get(obj, "model").and_then(Json::as_str);
                let api_version_set = borrowed::get(obj, "api_version").is_some_and(truthy);
                let base_url = borrowed::get(obj, "base_url").and_then(Json::as_str);
                match model.and_then(|model| llm_defaults(model, api_version_set, base_url)) {
                    Some(_) => Before::Bail,
                    None => Before::Continue,
                }
            }
            _ => Before::Continue,
        },
        BeforeHook::HookConfigNormalize => match v {
            Json::Object(outer) => {
                let rewrite = borrowed::get(outer, "hooks").is_some()
                    || outer.iter().any(|(k, _)| pascal_to_snake(k) != *k);
                // Rewriting (and its errors) is left to the `Value` path.
                if rewrite {
                    Before::Bail
                } else {
                    Before::Continue
                }
            }
            _ => Before::Continue,
        },
        BeforeHook::Tags => match v {
            Json::Null => Before::Stop(true),
            Json::Object(obj) => {
                for (key, value) in obj {
                    if !tag_key_is_valid(key) {
                        return Before::Stop(false);
                    }
                    let len = match value {
                        Json::String(s) => s.chars().count(),
                        Json::Array(a) => a.len(),
                        Json::Object(o) => o.len(),
                        _ => break,
                    };
                    if len > TAG_VALUE_MAX_CHARS {
                        return Before::Stop(false);
                    }
                }
                Before::Continue
            }
            _ => Before::Stop(false),
        },
        // A value these rewrite is left to the `Value` path.
        BeforeHook::AgentPromptKwargs => match v {
            Json::Object(_) => Before::Continue,
            _ => Before::Bail,
        },
        BeforeHook::WorkingDirStr => match v {
            Json::String(_) => Before::Continue,
            _ => Before::Bail,
        },
        BeforeHook::NoneIsEmptyDict | BeforeHook::NoneIsEmptyStr => match v {
            Json::Null => Before::Bail,
            _ => Before::Continue,
        },
        BeforeHook::Secret => match v {
            Json::Null => Before::Stop(true),
            Json::String(s) if !is_no_secret_str(s) => Before::Continue,
            // Made `None` (falsy, blank or redacted), or a crash of the reference: the
            // `Value` path decides.
            _ => Before::Bail,
        },
        BeforeHook::OptionalSecret => match v {
            Json::String(s) if is_no_secret_str(s) => Before::Bail,
            _ => Before::Continue,
        },
        BeforeHook::SecretMap => match v {
            Json::Object(map)
                if map
                    .iter()
                    .any(|(_, value)| value.as_str().is_some_and(is_no_secret_str)) =>
            {
                Before::Bail
            }
            _ => Before::Continue,
        },
        BeforeHook::StrValues => match v {
            Json::Object(map) if !map.iter().all(|(_, value)| value.as_str().is_some()) => {
                Before::Bail
            }
            _ => Before::Continue,
        },
        BeforeHook::AllowedTools => match v {
            Json::String(_) => Before::Bail,
            Json::Array(tools) if !tools.iter().all(|t| t.as_str().is_some()) => Before::Bail,
            _ => Before::Continue,
        },
    }
}

/// Validates `text` (a body past the BOM, surrogate and depth checks of `parse`) on the
/// borrowed tree: the redacted record and its summary, or `None` for the `Value` path.
pub(crate) fn validate(
    tree: &Tree,
    text: &[u8],
) -> Option<(Box<serde_json::value::RawValue>, ConversationSummary)> {
    let mut record = borrowed::parse(text)?;
    let mut walker = FastWalker {
        tree,
        union_depth: 0,
        bail: false,
    };
    if !walker.model(tree.root, &mut record) || walker.bail {
        return None;
    }
    crate::redact::redact_record(&mut record);
    let summary = summarize(&record)?;
    let record = serde_json::value::to_raw_value(&record).ok()?;
    Some((record, summary))
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    use crate::{parse_json, validate_body, validate_conversation};

    fn fixtures_dir() -> PathBuf {
        std::env::var_os("SANDGATE_FIXTURES")
            .map(PathBuf::from)
            .unwrap_or_else(|| {
                Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures/webhook")
            })
    }

    /// (name, body) of every fixture body in `folder`.
    fn cases(folder: &str) -> Vec<(String, Vec<u8>, ())> {
        let dir = fixtures_dir().join(folder);
        let mut out = Vec::new();
        let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        for entry in entries {
            let path = entry.unwrap_or_else(|e| panic!("{e}")).path();
            let name = path
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or_default();
            if name.ends_with(".json") && !name.ends_with(".expected.json") {
                let body =
                    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                out.push((format!("{folder}/{name}"), body, ()));
            }
        }
        out
    }

    /// The service answers most deliveries through `validate_body`, the borrowed fast path;
    /// every body it accepts must be accepted by the `Value` path with the same stored record
    /// (byte for byte) and summary, and every body the `Value` path rejects must fall to it.
    #[test]
    fn fast_path_agrees_with_the_value_path() {
        let mut failures = Vec::new();
        let (mut accepted, mut fast) = (0, 0);
        let mut bodies: Vec<(String, Vec<u8>)> = ["accept", "reject", "either"]
            .into_iter()
            .flat_map(cases)
            .map(|(name, body, _)| (name, body))
            .collect();
        // What only the parser sees: escapes, a repeated key (secret in its first place), a
        // BOM, lone surrogates, whitespace, and numbers serde_json writes back differently.
        let base = String::from_utf8(
            std::fs::read(fixtures_dir().join("accept/agent_basic_idle.json")).unwrap_or_default(),
        )
        .unwrap_or_default();
        for (name, from, to) in [
            ("escaped-key", "\"model\"", "\"mod\\u0065l\""),
            (
                "escapes",
                "{",
                "{\"title\": \"a\\n\\\"b\\/\\u00e9\\ud83d\\ude00\",",
            ),
            (
                "repeat",
                "{",
                "{\"title\": \"x\", \"title\": \"y\", \"max_iterations\": 7,",
            ),
            (
                "repeat-secret",
                "\"model\"",
                "\"api_key\": \"sk-1\", \"api_key\": \"sk-2\", \"model\"",
            ),
            ("surrogate", "{", "{\"title\": \"a\\ud800b\","),
            (
                "numbers",
                "\"max_iterations\": 500",
                "\"max_iterations\": 5.0e2",
            ),
            ("spaces", "{", "{\n\t "),
        ] {
            let changed = base.replacen(from, to, 1);
            assert_ne!(changed, base, "{name}");
            bodies.push((format!("synthetic/{name}"), changed.into_bytes()));
        }
        let mut bom = b"\xEF\xBB\xBF".to_vec();
        bom.extend_from_slice(base.as_bytes());
        bodies.push(("synthetic/bom".into(), bom));
        for (name, body) in bodies {
            let slow = parse_json(&body)
                .map_err(|e| vec![e])
                .and_then(validate_conversation);
            accepted += usize::from(slow.is_ok());
            match (validate_body(&body), slow) {
                (Some((record, summary)), Ok(slow)) => {
                    fast += 1;
                    let slow_record = serde_json::to_string(&slow.record).unwrap_or_default();
                    if record.get() != slow_record || summary != slow.summary {
                        failures.push(format!("{name}: the fast path stored something else"));
                    }
                }
                (Some(_), Err(errors)) => failures.push(format!(
                    "{name}: accepted by the fast path, rejected with {:?}",
                    errors.first()
                )),
                (None, _) => {}
            }
        }
        assert!(failures.is_empty(), "{failures:#?}");
        // Only hook rewrites and such leave the fast path.
        assert!(
            fast * 10 >= accepted * 9,
            "{fast} of {accepted} took the fast path"
        );
    }
}
