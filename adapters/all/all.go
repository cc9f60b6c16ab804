// Package all imports every adapter shipped with Switchyard, so that
// broker.Open understands all their URL schemes. Programs that use one
// broker should import just that adapter instead.
package all

import (
	_ "github.com/switchyard-dev/switchyard/adapters/asynq"        // redis://, rediss://
	_ "github.com/switchyard-dev/switchyard/adapters/embedded"     // embedded://, mem://
	_ "github.com/switchyard-dev/switchyard/adapters/gcppubsub"    // gcppubsub://
	_ "github.com/switchyard-dev/switchyard/adapters/nats"         // nats://
	_ "github.com/switchyard-dev/switchyard/adapters/postgres"     // postgres://, postgresql:// (the broker's registry; ledger.Open has its own)
	_ "github.com/switchyard-dev/switchyard/adapters/rabbitmq"     // rabbitmq://, amqps://
	_ "github.com/switchyard-dev/switchyard/adapters/redisstreams" // redis-streams://
	_ "github.com/switchyard-dev/switchyard/adapters/sqs"          // sqs://
)
