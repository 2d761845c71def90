# The layering of pagedkv: which rooms (src/<room>) each room may include, besides
# itself and the public API (include/pagedkv). docs/architecture.md ("Layers")
# explains it; change the two together. Read by cmake/rooms.cmake (configure) and
# cmake/check_layers.cmake (every build).
set(PAGEDKV_ROOMS util kv backend model jinja tokenizer engine server cli)
set(PAGEDKV_ROOM_util)
set(PAGEDKV_ROOM_kv        util)
set(PAGEDKV_ROOM_backend   kv util)
set(PAGEDKV_ROOM_model     backend kv util)
set(PAGEDKV_ROOM_jinja     util)
set(PAGEDKV_ROOM_tokenizer jinja util)
set(PAGEDKV_ROOM_engine    model backend kv tokenizer jinja util)
set(PAGEDKV_ROOM_server    engine model backend kv tokenizer jinja util)
set(PAGEDKV_ROOM_cli       server engine model backend kv tokenizer jinja util)
