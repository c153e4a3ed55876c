"""The harness-side metering proxy between a run's agent and the Messages API.

The agent never holds the real API key. Each run gets its own listener and a
per-run token; the proxy checks every request against the run's arm's
policy, reserves its worst case against the run's dollar cap, forwards the
checked body written anew with the real key, relays the answer as it
arrives, and books what it cost. Every answer's usage (input, output,
cache-write and cache-read tokens, and server-tool uses) is priced from the
pinned table in ``protocol/prices.yml`` in :class:`decimal.Decimal` and
appended to ``<record_dir>/<run_id>/proxy_usage.jsonl`` on the harness side,
beside the exchange record ``proxy_exchanges.jsonl`` (what the model was
shown and what it said).

One module per concern, each importing only those above it in this list:

- :mod:`.wire`: the Messages API's wire format: the body parsed once and
  written anew, event lines split in linear time, a refusal as the API's error;
- :mod:`.exchanges`: where a run's records live, and the exchange record;
- :mod:`.policy`: what a request may carry: fields, headers (``study.yml``
  ``model_proxy``), and the arm's blocks, sources and server tools
  (``protocol/arms/arms.yml``, :class:`~pilot.protocol.request_policy.RequestPolicy`);
- :mod:`.metering`: each request's worst case reserved against the run's cap
  and each answer booked once, whatever ends it;
- :mod:`.relay`: the HTTP side: a listener per run, admission from the
  headers, the relay of the answer, the close of a run's books, and
  :class:`MeteringProxy` itself.

The names below are the package's public face: import them from here.
"""

from pilot.agents.model_proxy.exchanges import (
    EXCHANGE_TEXT_LIMIT,
    EXCHANGES_FILE_NAME,
    REQUEST_BLOCKS_MAX,
    SEEN_KEYS_MAX,
    USAGE_FILE_NAME,
    AnswerRecord,
    RequestBlocks,
    block_key,
    exchanges_path,
    flatten_tool_result,
    read_exchange_record,
    read_exchanges,
    record_folder_name,
    request_blocks,
    request_record,
)
from pilot.agents.model_proxy.metering import (
    COUNT_MARGIN,
    COUNT_TOKENS_BURST,
    COUNT_TOKENS_PER_MINUTE,
    EXCHANGES_MAX_BYTES,
    FRAMING_ALLOWANCE_TOKENS,
    MAX_BODY_BYTES,
    MAX_IN_FLIGHT,
    MAX_IN_FLIGHT_BODY_BYTES,
    MAX_OPEN_CONNECTIONS,
    REFUSAL_KEYS,
    REFUSAL_ROWS_PER_REASON,
    OpenRequest,
    RunMeter,
    TokenBucket,
    count_input_bound,
    input_bound,
    server_tool_fees,
    server_tool_input,
    worst_case,
)
from pilot.agents.model_proxy.policy import (
    COUNT_KEYS,
    MESSAGE_KEYS,
    HeaderPolicy,
    RequestFacts,
    ServerToolOffer,
    asks_one_hour_cache,
    cache_control_may_be_one_hour,
    check_content,
    check_request,
    check_tools,
    default_policy,
)
from pilot.agents.model_proxy.relay import (
    BODY_IDLE_TIMEOUT_S,
    CAP_ERROR_TYPE,
    CAP_MESSAGE_PREFIX,
    CAP_STATUS,
    CLOSE_WAIT_S,
    COUNT_TIMEOUT_S,
    KEEP_ALIVE_IDLE_S,
    LINGER_BYTES,
    LINGER_S,
    MAX_SOCKET_PATH,
    MeteringProxy,
    UnixHTTPConnection,
)
from pilot.agents.model_proxy.wire import (
    COUNT_ROUTE,
    MAX_EVENT_LINE_BYTES,
    MESSAGES_ROUTE,
    RUN_ID_HEADER,
    EventLines,
    LineTooLong,
    RequestRefused,
    error_body,
    parse_body,
    run_id_from_header,
    run_id_header_value,
    serialise_body,
    serialise_request,
    short_repr,
)
from pilot.protocol.prices import ModelPrice, PriceTable, Usage

__all__ = [
    "BODY_IDLE_TIMEOUT_S",
    "CAP_ERROR_TYPE",
    "CAP_MESSAGE_PREFIX",
    "CAP_STATUS",
    "CLOSE_WAIT_S",
    "COUNT_KEYS",
    "COUNT_MARGIN",
    "COUNT_ROUTE",
    "COUNT_TIMEOUT_S",
    "COUNT_TOKENS_BURST",
    "COUNT_TOKENS_PER_MINUTE",
    "EXCHANGES_FILE_NAME",
    "EXCHANGES_MAX_BYTES",
    "EXCHANGE_TEXT_LIMIT",
    "FRAMING_ALLOWANCE_TOKENS",
    "KEEP_ALIVE_IDLE_S",
    "LINGER_BYTES",
    "LINGER_S",
    "MAX_BODY_BYTES",
    "MAX_EVENT_LINE_BYTES",
    "MAX_IN_FLIGHT",
    "MAX_IN_FLIGHT_BODY_BYTES",
    "MAX_OPEN_CONNECTIONS",
    "MAX_SOCKET_PATH",
    "MESSAGES_ROUTE",
    "MESSAGE_KEYS",
    "REFUSAL_KEYS",
    "REFUSAL_ROWS_PER_REASON",
    "REQUEST_BLOCKS_MAX",
    "RUN_ID_HEADER",
    "SEEN_KEYS_MAX",
    "USAGE_FILE_NAME",
    "AnswerRecord",
    "EventLines",
    "HeaderPolicy",
    "LineTooLong",
    "MeteringProxy",
    "ModelPrice",
    "OpenRequest",
    "PriceTable",
    "RequestBlocks",
    "RequestFacts",
    "RequestRefused",
    "RunMeter",
    "ServerToolOffer",
    "TokenBucket",
    "UnixHTTPConnection",
    "Usage",
    "asks_one_hour_cache",
    "block_key",
    "cache_control_may_be_one_hour",
    "check_content",
    "check_request",
    "check_tools",
    "count_input_bound",
    "default_policy",
    "error_body",
    "exchanges_path",
    "flatten_tool_result",
    "input_bound",
    "parse_body",
    "read_exchange_record",
    "read_exchanges",
    "record_folder_name",
    "request_blocks",
    "request_record",
    "run_id_from_header",
    "run_id_header_value",
    "serialise_body",
    "serialise_request",
    "server_tool_fees",
    "server_tool_input",
    "short_repr",
    "worst_case",
]
