module github.com/switchyard-lb/switchyard/wasm-sdk/go

go 1.23.0
