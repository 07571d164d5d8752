//! End-to-end tests of `sandgate`: real servers on port 0, real Redis, in parallel.
#![expect(
    clippy::expect_used,
    reason = "a test fails loudly, naming what it expected"
)]

mod common;

mod admin;
mod agent_server;
mod app_server;
mod audit;

mod catalog;
mod chart;
mod coding_agents;
mod coding_agents_acp;
mod console;
mod docs_links;
mod event_store;
mod events;
mod faults;
mod gateway_accounting;
mod gateway_admission;
mod gateway_attacks;
mod gateway_keys;
mod gateway_org_lists;
mod gateway_orgs;
mod gateway_sessions;
mod gateway_usage;
mod hostile;
mod http_cases;
mod idle_pause;
mod install_tools;
mod k8s_policy;
mod kubernetes;
mod kubernetes_edge;
mod kubernetes_failures;
mod ledger;
mod ledger_measures;
mod ledger_tags;
mod limits;
mod llm_sdk_keys;
mod llm_sdks;
mod log_secrets;
mod login_rate;
mod model_gateway;
mod noisy_tenants;
mod observability;
mod openapi_defaults;
mod ordering;
mod personalised_pools;
mod process;
mod process_identity;
mod process_isolation;
mod process_network;
mod process_real_clients;
mod process_sandboxes;
mod process_sessions;
mod process_view;
mod quotas;
mod redaction;
mod redis_tls;
mod round_four;
mod runtime_clients;
mod sandbox_api;
mod schemathesis;
mod slow_clients;
mod start_timeline;
mod store_conformance;
mod support_bundle;
mod tenancy;
mod troubleshoot;
mod upstream_faults;
mod warm_limits;
mod warm_pools;
mod webhook_fixtures;
