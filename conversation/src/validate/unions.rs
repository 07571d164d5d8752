//! The unions of the walk: OpenHands' kind unions (a `kind` naming a class), pydantic's
//! tagged unions (a discriminator's value), and smart-mode unions, whose members are tried
//! in turn and whose errors are labelled by member as pydantic-core labels them.

use serde_json::{Value, json};

use crate::hooks::python::python_str;
use crate::pending::PendingError;
use crate::tree::{KindUnion, NodeId, TaggedUnion};

use super::{Walker, hooks_value_error, model_attributes_type};

impl Walker<'_> {
    pub(super) fn kind_union(&mut self, k: &KindUnion, v: &mut Value) -> bool {
        let Value::Object(map) = v else {
            self.crashed |= self.tree.kind_needs_object;
            return self.fail(self.not_an_object(&k.base));
        };
        let kind = map.get("kind");
        if let Some(Value::String(kind)) = kind
            && let Some((_, node)) = k.variants.iter().find(|(tag, _)| tag == kind)
        {
            // The variant validates the same object; its errors carry no variant segment.
            let outer = std::mem::replace(&mut self.from_attributes, false);
            let valid = self.node(*node, v);
            self.from_attributes = outer;
            return valid;
        }
        let shown = match kind {
            None => String::new(),
            Some(value) => python_str(value),
        };
        for (_, node) in k.variants.iter() {
            self.scrub(*node, v);
        }
        self.fail(hooks_value_error(&format!(
            "Unknown kind '{shown}' for {}; Expected one of: {}",
            k.qualname, k.expected
        )))
    }

    pub(super) fn tagged_union(&mut self, t: &TaggedUnion, v: &mut Value) -> bool {
        let Value::Object(map) = v else {
            return self.fail(model_attributes_type());
        };
        let discriminator = format!("'{}'", t.prop);
        let error = match map.get(&t.prop) {
            None => PendingError::new(
                "union_tag_not_found",
                format!("Unable to extract tag using discriminator {discriminator}"),
                Some(json!({ "discriminator": discriminator })),
            ),
            Some(tag) => {
                let tag = python_str(tag);
                if let Some((label, node)) = t.variants.iter().find(|(v, _)| *v == tag) {
                    let s = self.errors.len();
                    let ok = self.node(*node, v);
                    for e in &mut self.errors[s..] {
                        e.push_label(label);
                    }
                    return ok;
                }
                PendingError::new(
                    "union_tag_invalid",
                    format!(
                        "Input tag '{tag}' found using {discriminator} does not match any of the expected tags: {}",
                        t.expected
                    ),
                    Some(
                        json!({ "discriminator": discriminator, "tag": tag, "expected_tags": t.expected }),
                    ),
                )
            }
        };
        for (_, node) in t.variants.iter() {
            self.scrub(*node, v);
        }
        self.fail(error)
    }

    pub(super) fn union(&mut self, members: &[NodeId], labels: &[String], v: &mut Value) -> bool {
        let start = self.errors.len();
        self.union_depth += 1;
        let mut ok = false;
        for (member, label) in members.iter().zip(labels) {
            let s = self.errors.len();
            if self.node(*member, v) {
                ok = true;
                break;
            }
            for e in &mut self.errors[s..] {
                e.push_label(label);
            }
        }
        self.union_depth -= 1;
        if ok {
            self.errors.truncate(start);
        } else {
            let errors = self.errors.split_off(start);
            for member in members {
                self.scrub(*member, v);
            }
            self.errors.extend(errors);
        }
        ok
    }
}
