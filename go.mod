module github.com/orchestrd/orchestrd

go 1.26

require (
	github.com/BurntSushi/toml v1.6.0 // indirect
	github.com/asynkron/protoactor-go v0.0.0-20240822202345-3c0e61ca19c9 // indirect
	github.com/mattn/go-colorable v0.1.14 // indirect
	github.com/mattn/go-isatty v0.0.20 // indirect
	github.com/oklog/run v1.2.0 // indirect
	github.com/rs/zerolog v1.35.1 // indirect
	github.com/shirou/gopsutil/v4 v4.26.10 // indirect
	go.uber.org/goleak v1.3.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
)
