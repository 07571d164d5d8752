"""The environment the drivers give a real agent-server in a sandbox: no VS Code or VNC, no
banner, and nothing fetched from the network (LiteLLM's cost map, Hugging Face tokenizers),
since the tests run offline."""

OFFLINE_AGENT_SERVER = {
    "OH_ENABLE_VSCODE": "false",
    "OH_ENABLE_VNC": "false",
    "OPENHANDS_SUPPRESS_BANNER": "1",
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
}
