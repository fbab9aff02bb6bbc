#!/usr/bin/env node
// A kafkajs transactional producer for tests/interop/test_transactions.py.
//
// Reads one JSON plan from argv[2]:
//   {"brokers": ["127.0.0.1:PORT"], "transactionalId": "...", "topic": "t",
//    "group": "g",
//    "transactions": [{"values": ["a", "b"], "commit": true,
//                      "offsets": [{"partition": 0, "offset": "5"}]}, ...]}
// runs each transaction in turn (send, then sendOffsets if "offsets" is given, then
// commit or abort) and prints {"done": N} as JSON on stdout; on an error
// {"error": message} and exit code 1.
'use strict'

const { Kafka, logLevel } = require('kafkajs')

async function main () {
  const plan = JSON.parse(process.argv[2])
  const kafka = new Kafka({ clientId: 'txn-test', brokers: plan.brokers, logLevel: logLevel.WARN })
  const producer = kafka.producer({
    transactionalId: plan.transactionalId, idempotent: true, maxInFlightRequests: 1,
  })
  await producer.connect()
  let done = 0
  try {
    for (const t of plan.transactions) {
      const txn = await producer.transaction()
      await txn.send({ topic: plan.topic, messages: t.values.map((value) => ({ value })) })
      if (t.offsets) {
        await txn.sendOffsets({
          consumerGroupId: plan.group,
          topics: [{ topic: plan.topic, partitions: t.offsets }],
        })
      }
      if (t.commit) {
        await txn.commit()
      } else {
        await txn.abort()
      }
      done += 1
    }
  } finally {
    await producer.disconnect()
  }
  process.stdout.write(JSON.stringify({ done }) + '\n')
}

main().catch((err) => {
  process.stdout.write(JSON.stringify({ error: String(err && err.stack || err) }) + '\n')
  process.exit(1)
})
