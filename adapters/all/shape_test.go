package all_test

import (
	"context"
	"net/url"

	"github.com/switchyard-dev/switchyard/adapters/asynq"
	"github.com/switchyard-dev/switchyard/adapters/embedded"
	"github.com/switchyard-dev/switchyard/adapters/gcppubsub"
	"github.com/switchyard-dev/switchyard/adapters/nats"
	"github.com/switchyard-dev/switchyard/adapters/postgres"
	"github.com/switchyard-dev/switchyard/adapters/rabbitmq"
	"github.com/switchyard-dev/switchyard/adapters/redisstreams"
	"github.com/switchyard-dev/switchyard/adapters/sqs"
)

// Every adapter has one constructor shape: an exported Config, ParseURL
// reading one from a URL, and OpenConfig opening a driver from one. This
// file does not compile when an adapter leaves the shape.
var (
	_ func(*url.URL) (*asynq.Config, error)                                     = asynq.ParseURL
	_ func(context.Context, *asynq.Config) (*asynq.Driver, error)               = asynq.OpenConfig
	_ func(*url.URL) (*embedded.Config, error)                                  = embedded.ParseURL
	_ func(context.Context, *embedded.Config) (*embedded.Driver, error)         = embedded.OpenConfig
	_ func(*url.URL) (*gcppubsub.Config, error)                                 = gcppubsub.ParseURL
	_ func(context.Context, *gcppubsub.Config) (*gcppubsub.Driver, error)       = gcppubsub.OpenConfig
	_ func(*url.URL) (*nats.Config, error)                                      = nats.ParseURL
	_ func(context.Context, *nats.Config) (*nats.Driver, error)                 = nats.OpenConfig
	_ func(*url.URL) (*postgres.Config, error)                                  = postgres.ParseURL
	_ func(context.Context, *postgres.Config) (*postgres.Driver, error)         = postgres.OpenConfig
	_ func(*url.URL) (*rabbitmq.Config, error)                                  = rabbitmq.ParseURL
	_ func(context.Context, *rabbitmq.Config) (*rabbitmq.Driver, error)         = rabbitmq.OpenConfig
	_ func(*url.URL) (*redisstreams.Config, error)                              = redisstreams.ParseURL
	_ func(context.Context, *redisstreams.Config) (*redisstreams.Driver, error) = redisstreams.OpenConfig
	_ func(*url.URL) (*sqs.Config, error)                                       = sqs.ParseURL
	_ func(context.Context, *sqs.Config) (*sqs.Driver, error)                   = sqs.OpenConfig
)
