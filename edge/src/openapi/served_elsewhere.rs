//! The operations the `sandgate` binary serves beside the edge's routes, on the same
//! listener (`/metrics`, and `sandgate serve`'s support bundle): described here so that the
//! document covers every path a caller can reach.

use utoipa::Modify;
use utoipa::openapi::path::{HttpMethod, OperationBuilder};
use utoipa::openapi::schema::{KnownFormat, ObjectBuilder, SchemaFormat, Type};
use utoipa::openapi::security::SecurityRequirement;
use utoipa::openapi::{Content, OpenApi, Ref, ResponseBuilder};

pub(super) struct ServedElsewhere;

impl Modify for ServedElsewhere {
    fn modify(&self, openapi: &mut OpenApi) {
        let metrics = OperationBuilder::new()
            .operation_id(Some("metrics"))
            .summary(Some(
                "Prometheus metrics of this process (text exposition format)",
            ))
            .response(
                "200",
                ResponseBuilder::new().description("The metrics").content(
                    "text/plain",
                    Content::new(Some(ObjectBuilder::new().schema_type(Type::String))),
                ),
            );
        let error = |description: &str| {
            ResponseBuilder::new()
                .description(description)
                .content(
                    "application/json",
                    Content::new(Some(Ref::from_schema_name("ErrorDetail"))),
                )
                .build()
        };
        let bundle = OperationBuilder::new()
            .operation_id(Some("download_support_bundle"))
            .tag("Runtime management")
            .summary(Some(
                "A support bundle: diagnostics to hand to someone who helps",
            ))
            .description(Some(
                "A `tar.gz` built by the server, of what someone else needs to help with the \
                 install: versions and build, the effective settings (secrets shown only as set \
                 or unset), `check-config`'s findings, the store's topology and health, each \
                 warm pool's state and recent failures, recent sandbox starts, the model \
                 gateway's entries (never keys) and recent upstream errors, a metrics snapshot, \
                 and recent warning and error log lines. Every secret the server knows, and \
                 anything credential-shaped, is redacted; each file is cut at 1 MiB. Served by \
                 `sandgate serve`; `sandgate support-bundle` downloads it.",
            ))
            .security(SecurityRequirement::new("AdminToken", Vec::<String>::new()))
            .response(
                "200",
                ResponseBuilder::new().description("The archive").content(
                    "application/gzip",
                    Content::new(Some(
                        ObjectBuilder::new()
                            .schema_type(Type::String)
                            .format(Some(SchemaFormat::KnownFormat(KnownFormat::Binary))),
                    )),
                ),
            )
            .response("401", error("Missing, invalid or expired admin token"))
            .response(
                "403",
                error("No admin password is configured: `Admin functionality is disabled`"),
            );
        openapi
            .paths
            .add_path_operation("/metrics", vec![HttpMethod::Get], metrics);
        openapi.paths.add_path_operation(
            "/api/admin/support-bundle",
            vec![HttpMethod::Get],
            bundle,
        );
    }
}
