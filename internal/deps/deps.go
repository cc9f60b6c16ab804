//go:build tools

// Package deps pins the modules the adapters and stores use while they are
// being written, so that concurrent work never races on go.mod.
package deps

import (
	_ "github.com/aws/aws-sdk-go-v2/config"
	_ "github.com/aws/aws-sdk-go-v2/service/sqs"
	_ "github.com/hibiken/asynq"
	_ "github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/nats-io/nats.go/jetstream"
	_ "github.com/rabbitmq/amqp091-go"
	_ "github.com/redis/go-redis/v9"
	_ "github.com/robfig/cron/v3"
	_ "github.com/sony/gobreaker/v2"
	_ "modernc.org/sqlite"
	_ "pgregory.net/rapid"
)
