module github.com/outlast-llm/outlast/bench

go 1.26.0

require (
	github.com/failsafe-go/failsafe-go v0.9.8
	github.com/hashicorp/go-retryablehttp v0.7.8
	github.com/openai/openai-go/v3 v3.98.0
	github.com/outlast-llm/outlast v0.0.0
	golang.org/x/sync v0.25.0
)

require (
	github.com/bits-and-blooms/bitset v1.24.4 // indirect
	github.com/coder/websocket v1.8.15 // indirect
	github.com/hashicorp/go-cleanhttp v0.5.2 // indirect
	github.com/influxdata/tdigest v0.0.1 // indirect
	github.com/tidwall/gjson v1.20.0 // indirect
	github.com/tidwall/match v1.1.1 // indirect
	github.com/tidwall/pretty v1.2.1 // indirect
	github.com/tidwall/sjson v1.2.5 // indirect
)

replace github.com/outlast-llm/outlast => ../
