//! The generic walker: validates a JSON value against the compiled tree the way pydantic
//! v2 (lax mode, as FastAPI runs it) does, redacting secrets in place as it goes.
//!
//! Errors are built inside-out: a node pushes an error with an empty location and every
//! caller on the way up prepends its segment, so the happy path keeps no path stack and
//! allocates nothing. Unions are walked in [`unions`].

mod unions;

use serde_json::{Map, Value, json};

use super::REDACTED;
use super::errors::LocItem;
use super::hooks::BeforeHook;
use super::hooks::after::{run_after, run_field};
use super::hooks::before::{Before, run_before};
use super::pending::{PendingError, missing};
use super::scalars;
use super::tree::{ModelId, Node, NodeId, StrFormat, Tree};
use super::{canonical, datetime};

pub(crate) struct Walker<'t> {
    tree: &'t Tree,
    pub errors: Vec<PendingError>,
    /// Non-zero while a smart union tries its members: a member that fails must leave
    /// the value as it found it for the next member.
    union_depth: u32,
    /// FastAPI validates the body with `from_attributes=True`, and a model refuses a value
    /// that is not an object with `model_attributes_type` then. The SDK's discriminated
    /// unions (`kind`) validate the variant they pick anew, without it: below one, the
    /// error is `model_type`.
    from_attributes: bool,
    /// The release this tree models would have crashed on the body
    /// ([`Tree::kind_needs_object`]).
    pub crashed: bool,
}

/// Above this many fields a model would need a wider "seen" set.
pub(crate) const MAX_FIELDS: usize = 128;

fn redact(v: &mut Value) {
    if !v.is_null() {
        *v = Value::String(REDACTED.to_owned());
    }
}

impl<'t> Walker<'t> {
    pub fn new(tree: &'t Tree) -> Self {
        Walker {
            tree,
            errors: Vec::new(),
            union_depth: 0,
            from_attributes: true,
            crashed: false,
        }
    }

    fn fail(&mut self, e: PendingError) -> bool {
        self.errors.push(e);
        false
    }

    fn push_path_since(&mut self, start: usize, seg: LocItem) {
        for e in &mut self.errors[start..] {
            e.push_path(&seg);
        }
    }

    /// Validates `v` against node `id`; true when it added no error.
    pub fn node(&mut self, id: NodeId, v: &mut Value) -> bool {
        let tree = self.tree;
        let checked = match tree.node(id) {
            Node::Any => Ok(()),
            Node::Null if v.is_null() => Ok(()),
            Node::Null => Err(Box::new(PendingError::new(
                "none_required",
                "Input should be None",
                None,
            ))),
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
            Node::Literal { values, expected } => {
                scalars::check_choice(&*v, values, expected, "literal_error")
            }
            Node::Enum { values, expected } => scalars::check_choice(&*v, values, expected, "enum"),
            Node::List {
                items,
                min_items,
                max_items,
                tuple,
            } => return self.list(*items, *min_items, *max_items, *tuple, v),
            Node::Tuple { items } => return self.tuple(items, v),
            Node::Dict { values } => return self.dict(*values, v),
            Node::Model(m) => return self.model(*m, v),
            Node::KindUnion(k) => return self.kind_union(k, v),
            Node::TaggedUnion(t) => return self.tagged_union(t, v),
            Node::Nullable(inner) => return v.is_null() || self.node(*inner, v),
            Node::Union {
                members,
                labels,
                secret,
            } => {
                let ok = self.union(members, labels, v);
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
                if !self.node(*inner, v) {
                    return false;
                }
                return match run_field(*hook, &*v) {
                    Some(e) => self.fail(e),
                    None => true,
                };
            }
        };
        match checked {
            Ok(()) => {
                // Stored in its documented type, as the receiver's model would dump it;
                // inside a union the member that matched decides, so it stays as sent.
                if self.union_depth == 0
                    && let Some(canonical) = canonical::canonical(tree.node(id), v)
                {
                    *v = canonical;
                }
                true
            }
            Err(e) => self.fail(*e),
        }
    }

    /// Walks `id` only to redact what it marks secret; its errors are dropped. Used where
    /// validation stopped early, so an error echoing its input still hides the secrets.
    fn scrub(&mut self, id: NodeId, v: &mut Value) {
        let (len, depth) = (self.errors.len(), self.union_depth);
        self.union_depth = 0;
        self.node(id, v);
        self.union_depth = depth;
        self.errors.truncate(len);
    }

    fn list(
        &mut self,
        items: Option<NodeId>,
        min: Option<usize>,
        max: Option<usize>,
        tuple: bool,
        v: &mut Value,
    ) -> bool {
        let Value::Array(arr) = v else {
            return self.fail(if tuple {
                tuple_type()
            } else {
                PendingError::new("list_type", "Input should be a valid list", None)
            });
        };
        let start = self.errors.len();
        if let Some(items) = items {
            for (i, item) in arr.iter_mut().enumerate() {
                let s = self.errors.len();
                if !self.node(items, item) {
                    self.push_path_since(s, LocItem::Index(i));
                }
            }
        }
        if self.errors.len() > start {
            return false;
        }
        let len = arr.len();
        let field_type = if tuple { "Tuple" } else { "List" };
        if let Some(min) = min.filter(|m| len < *m) {
            return self.fail(length_error(
                "too_short",
                field_type,
                "at least",
                "min_length",
                min,
                len,
            ));
        }
        if let Some(max) = max.filter(|m| len > *m) {
            return self.fail(length_error(
                "too_long",
                field_type,
                "at most",
                "max_length",
                max,
                len,
            ));
        }
        true
    }

    fn tuple(&mut self, items: &[NodeId], v: &mut Value) -> bool {
        let Value::Array(arr) = v else {
            return self.fail(tuple_type());
        };
        let start = self.errors.len();
        for (i, item) in arr.iter_mut().enumerate().take(items.len()) {
            let s = self.errors.len();
            if !self.node(items[i], item) {
                self.push_path_since(s, LocItem::Index(i));
            }
        }
        let len = arr.len();
        if len > items.len() {
            self.errors.push(length_error(
                "too_long",
                "Tuple",
                "at most",
                "max_length",
                items.len(),
                len,
            ));
        }
        for i in len..items.len() {
            let mut e = missing();
            e.loc_rev.push(LocItem::Index(i));
            self.errors.push(e);
        }
        self.errors.len() == start
    }

    fn dict(&mut self, values: Option<NodeId>, v: &mut Value) -> bool {
        let Value::Object(map) = v else {
            return self.fail(PendingError::new(
                "dict_type",
                "Input should be a valid dictionary",
                None,
            ));
        };
        let Some(values) = values else { return true };
        let start = self.errors.len();
        for (k, item) in map.iter_mut() {
            let s = self.errors.len();
            if !self.node(values, item) {
                self.push_path_since(s, LocItem::Key(k.clone()));
            }
        }
        self.errors.len() == start
    }

    pub fn model(&mut self, id: ModelId, v: &mut Value) -> bool {
        let tree = self.tree;
        let model = tree.model(id);
        let Value::Object(map) = v else {
            return self.fail(self.not_an_object(&model.name));
        };
        let start = self.errors.len();
        let mut seen = [0u64; MAX_FIELDS / 64];
        let extra_order = model.fields.len() as u32;
        for (pos, (key, item)) in map.iter_mut().enumerate() {
            match model.keys.find(&model.fields, key) {
                Some(i) => {
                    seen[i / 64] |= 1 << (i % 64);
                    let s = self.errors.len();
                    if !self.node(model.fields[i].node, item) {
                        for e in &mut self.errors[s..] {
                            e.order = i as u32;
                            e.push_path(&LocItem::Key(key.clone()));
                        }
                    }
                }
                None if model.forbid_extra => {
                    let mut e = PendingError::new(
                        "extra_forbidden",
                        "Extra inputs are not permitted",
                        None,
                    );
                    e.push_path(&LocItem::Key(key.clone()));
                    e.order = extra_order + pos as u32;
                    self.errors.push(e);
                }
                None => {}
            }
        }
        for (i, field) in model.fields.iter().enumerate() {
            if field.required && seen[i / 64] & (1 << (i % 64)) == 0 {
                let mut e = missing();
                e.loc_rev.push(LocItem::Key(field.name.clone()));
                e.order = i as u32;
                self.errors.push(e);
            }
        }
        if self.errors.len() > start {
            // Fields were visited in input order; pydantic reports in definition order.
            self.errors[start..].sort_by_key(|e| e.order);
            return false;
        }
        match model.after.and_then(|hook| run_after(hook, model, &*v)) {
            Some(e) => self.fail(e),
            None => true,
        }
    }

    fn not_an_object(&self, class_name: &str) -> PendingError {
        if self.from_attributes {
            model_attributes_type()
        } else {
            model_type(class_name)
        }
    }

    fn before(&mut self, hook: BeforeHook, inner: NodeId, v: &mut Value) -> bool {
        let start = self.errors.len();
        match run_before(hook, v, &mut self.errors) {
            Before::Continue => self.node(inner, v),
            Before::Stop => {
                let ok = self.errors.len() == start;
                if !ok {
                    let errors = self.errors.split_off(start);
                    self.scrub(inner, v);
                    self.errors.extend(errors);
                }
                ok
            }
            Before::Replace(mut copy) => {
                let ok = self.node(inner, &mut copy);
                // Paths point into the rewritten copy, which the record will not hold.
                for e in &mut self.errors[start..] {
                    e.resolve_input(&copy);
                }
                ok
            }
            Before::Coerce(coerced) => {
                *v = coerced;
                self.node(inner, v)
            }
            Before::Settle(settled) => {
                *v = settled;
                true
            }
        }
    }
}

fn hooks_value_error(text: &str) -> PendingError {
    super::pending::value_error(text)
}

fn model_type(class_name: &str) -> PendingError {
    PendingError::new(
        "model_type",
        format!("Input should be a valid dictionary or instance of {class_name}"),
        Some(json!({ "class_name": class_name })),
    )
}

fn tuple_type() -> PendingError {
    PendingError::new("tuple_type", "Input should be a valid tuple", None)
}

fn model_attributes_type() -> PendingError {
    PendingError::new(
        "model_attributes_type",
        "Input should be a valid dictionary or object to extract fields from",
        None,
    )
}

fn length_error(
    error_type: &'static str,
    field_type: &str,
    bound_text: &str,
    bound_key: &str,
    bound: usize,
    actual: usize,
) -> PendingError {
    let unit = if bound == 1 { "item" } else { "items" };
    let mut ctx = Map::new();
    ctx.insert("field_type".into(), Value::String(field_type.into()));
    ctx.insert(bound_key.into(), Value::from(bound));
    ctx.insert("actual_length".into(), Value::from(actual));
    PendingError::new(
        error_type,
        format!(
            "{field_type} should have {bound_text} {bound} {unit} after validation, not {actual}"
        ),
        Some(Value::Object(ctx)),
    )
}
