package asynq

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/switchyard-dev/switchyard/broker"
)

var _ broker.ServerAnnouncer = (*Driver)(nil)

// asynq's server registry (hibiken/asynq v0.26.0, internal/base and
// internal/rdb): a zset of server keys scored by their expiry (Unix
// seconds), and one key per server holding its protobuf ServerInfo with
// a TTL. asynq's Inspector (and so asynqmon's Servers tab) lists the keys
// whose score has not passed.
const allServers = "asynq:servers"

// asynq's per-server worker records: a zset of workers keys scored by
// their expiry, and one hash per server (its tasks running now, keyed by
// task ID, each a protobuf WorkerInfo) with the same TTL as the server's
// record. asynq's Inspector joins them to the servers by server ID
// (ServerInfo.ActiveWorkers).
const allWorkers = "asynq:workers"

// workersKey is asynq's base.WorkersKey.
func workersKey(host string, pid int, id string) string {
	return fmt.Sprintf("asynq:workers:{%s:%d:%s}", host, pid, id)
}

// encodeWorkerInfo writes asynq's WorkerInfo message (internal/proto
// asynq.proto): host 1, pid 2, server_id 3, task_id 4, task_type 5,
// task_payload 6 (never written: payloads stay out of operator tools),
// queue 7, start_time 8, deadline 9 (only when the task has one).
func encodeWorkerInfo(info broker.ServerInfo, t broker.RunningTask, queue string) []byte {
	b := appendStringField(nil, 1, info.Host)
	b = appendVarintField(b, 2, int64(int32(min(info.PID, math.MaxInt32))))
	b = appendStringField(b, 3, info.ID)
	b = appendStringField(b, 4, t.ID)
	b = appendStringField(b, 5, t.Kind)
	b = appendStringField(b, 7, queue)
	b = appendTimestampField(b, 8, t.Started)
	return appendTimestampField(b, 9, t.Deadline)
}

// appendTimestampField appends a google.protobuf.Timestamp field, unless
// t is zero.
func appendTimestampField(b []byte, num protowire.Number, t time.Time) []byte {
	if t.IsZero() {
		return b
	}
	var ts []byte
	ts = appendVarintField(ts, 1, t.Unix())
	ts = appendVarintField(ts, 2, int64(t.Nanosecond()))
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendBytes(b, ts)
}

// serverKey is asynq's base.ServerInfoKey.
func serverKey(host string, pid int, id string) string {
	return fmt.Sprintf("asynq:servers:{%s:%d:%s}", host, pid, id)
}

// encodeServerInfo writes asynq's ServerInfo message (internal/proto
// asynq.proto): host 1, pid 2, server_id 3, concurrency 4, queues 5
// (map<string, int32>), strict_priority 6, status 7, start_time 8
// (google.protobuf.Timestamp), active_worker_count 9. Every lane's queue
// gets priority 1: Switchyard's lane policy (reserved and shared slots,
// promotion by age) has no asynq equivalent, and strict priority is off.
func encodeServerInfo(info broker.ServerInfo, queues []string) []byte {
	b := appendStringField(nil, 1, info.Host)
	b = appendVarintField(b, 2, int64(int32(min(info.PID, math.MaxInt32))))
	b = appendStringField(b, 3, info.ID)
	b = appendVarintField(b, 4, int64(int32(min(info.Slots, math.MaxInt32))))
	for _, q := range queues {
		var e []byte
		e = appendStringField(e, 1, q)
		e = appendVarintField(e, 2, 1)
		b = protowire.AppendTag(b, 5, protowire.BytesType)
		b = protowire.AppendBytes(b, e)
	}
	b = appendStringField(b, 7, "active")
	b = appendTimestampField(b, 8, info.Started)
	return appendVarintField(b, 9, int64(int32(min(info.Busy, math.MaxInt32))))
}

// AnnounceServer implements broker.ServerAnnouncer: it writes info as an
// asynq server record, as asynq's own heartbeat does (WriteServerState),
// so asynq's Inspector and asynqmon list the Switchyard worker with its
// host, pid, concurrency (slots), queues and start time, and writes
// asynq's per-task worker records (asynq:workers) for info.Running, so
// they list the tasks it runs as its active workers (kind, queue, start
// and deadline; never the payload). The records live for ttl (whole
// seconds, at least one) unless announced again.
func (d *Driver) AnnounceServer(ctx context.Context, info broker.ServerInfo, ttl time.Duration) error {
	const op = "announce server"
	if err := d.check(op); err != nil {
		return err
	}
	queues := make([]string, 0, len(info.Lanes))
	for _, l := range info.Lanes {
		if err := broker.ValidateName("lane", l); err != nil {
			return err
		}
		queues = append(queues, d.QueueName(l))
	}
	workers := make([]any, 0, 2*len(info.Running))
	for _, t := range info.Running {
		if err := broker.ValidateName("lane", t.Lane); err != nil {
			return err
		}
		workers = append(workers, t.ID, encodeWorkerInfo(info, t, d.QueueName(t.Lane)))
	}
	secs := max(int64(math.Ceil(ttl.Seconds())), 1)
	key, wkey := serverKey(info.Host, info.PID, info.ID), workersKey(info.Host, info.PID, info.ID)
	exp := time.Now().Add(time.Duration(secs) * time.Second)
	_, err := d.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		// As asynq's WriteServerState: both zsets, the server's record,
		// and its workers hash replaced as a whole.
		p.ZAdd(ctx, allServers, redis.Z{Score: float64(exp.Unix()), Member: key})
		p.ZAdd(ctx, allWorkers, redis.Z{Score: float64(exp.Unix()), Member: wkey})
		p.SetEx(ctx, key, encodeServerInfo(info, queues), time.Duration(secs)*time.Second)
		p.Del(ctx, wkey)
		if len(workers) > 0 {
			p.HSet(ctx, wkey, workers...)
			p.Expire(ctx, wkey, time.Duration(secs)*time.Second)
		}
		return nil
	})
	return classify(op, err, true)
}

// WithdrawServer implements broker.ServerAnnouncer, as asynq's
// ClearServerState does.
func (d *Driver) WithdrawServer(ctx context.Context, info broker.ServerInfo) error {
	const op = "withdraw server"
	if err := d.check(op); err != nil {
		return err
	}
	key, wkey := serverKey(info.Host, info.PID, info.ID), workersKey(info.Host, info.PID, info.ID)
	_, err := d.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.ZRem(ctx, allServers, key)
		p.ZRem(ctx, allWorkers, wkey)
		p.Del(ctx, key, wkey)
		return nil
	})
	return classify(op, err, true)
}
