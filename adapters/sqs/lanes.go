package sqs

import (
	"context"
	"regexp"
	"sort"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/switchyard-dev/switchyard/broker"
)

var _ broker.LaneLister = (*Driver)(nil)

// hashedRE matches a lane part that lanePart suffixed with a hash.
var hashedRE = regexp.MustCompile(`_[0-9a-f]{10}$`)

// Lanes lists the lanes that have queues in the driver's namespace (and
// mode, standard or FIFO), from ListQueues. Lanes whose queue names carry
// a hash (names with "." or ":", or too long; see queueNames) cannot be
// told back from their queue names and are left out (so is a lane whose
// name itself ends in "_" and ten hex digits). It needs
// sqs:ListQueues.
func (d *Driver) Lanes(ctx context.Context) ([]string, error) {
	if d.closed.Load() {
		return nil, broker.ClosedError("lanes")
	}
	prefix := d.cfg.Namespace + "_"
	seen := map[string]bool{}
	in := &awssqs.ListQueuesInput{QueueNamePrefix: aws.String(prefix), MaxResults: aws.Int32(1000)}
	for {
		out, err := d.client.ListQueues(ctx, in)
		if err != nil {
			return nil, classify("lanes", err)
		}
		for _, u := range out.QueueUrls {
			if lane, ok := d.laneOf(u[strings.LastIndexByte(u, '/')+1:]); ok {
				seen[lane] = true
			}
		}
		if out.NextToken == nil || *out.NextToken == "" {
			break
		}
		in.NextToken = out.NextToken
	}
	lanes := make([]string, 0, len(seen))
	for l := range seen {
		lanes = append(lanes, l)
	}
	sort.Strings(lanes)
	return lanes, nil
}

// laneOf maps a queue name back to its lane, when it can.
func (d *Driver) laneOf(name string) (string, bool) {
	part, ok := strings.CutPrefix(name, d.cfg.Namespace+"_")
	if !ok {
		return "", false
	}
	fifo := strings.HasSuffix(part, fifoSuffix)
	if fifo {
		part = strings.TrimSuffix(part, fifoSuffix)
	}
	switch {
	case strings.HasSuffix(part, dlqSuffix):
		part = strings.TrimSuffix(part, dlqSuffix)
	case strings.HasSuffix(part, delaySuffix) && d.cfg.FIFO && !fifo:
		part = strings.TrimSuffix(part, delaySuffix)
		fifo = true
	}
	if fifo != d.cfg.FIFO || broker.ValidateName("lane", part) != nil {
		return "", false
	}
	if hashedRE.MatchString(part) {
		return "", false // a hashed name: the lane itself is unknown
	}
	return part, true
}
