"""Bad input to `format("odradek")` fails with a message naming the option, the column or
the broker at fault, never with a silent empty result."""

from __future__ import annotations

import json
import re

import pytest
from pyspark.errors import PySparkException

from odradek.spark.options import OptionError, read_options, write_options

BOOT = {"kafka.bootstrap.servers": "127.0.0.1:9"}  # parsing only: never contacted


def read(spark, options):
    reader = spark.read.format("odradek")
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load().collect()


def test_misspelled_option_is_refused_with_the_option_it_resembles(spark, broker):
    with pytest.raises(PySparkException, match=r"unknown option 'startingoffset'.*"
                                               r"did you mean 'startingOffsets'"):
        read(spark, {"kafka.bootstrap.servers": broker.bootstrap, "subscribe": "x",
                     "startingOffset": "earliest"})


def test_missing_bootstrap_servers_is_named(spark):
    with pytest.raises(PySparkException, match=r"'kafka\.bootstrap\.servers' is required"):
        read(spark, {"subscribe": "x"})


def test_missing_subscribe_or_assign_is_named(spark, broker):
    with pytest.raises(PySparkException,
                       match="one of the options 'subscribe', 'subscribePattern' or 'assign'"):
        read(spark, {"kafka.bootstrap.servers": broker.bootstrap})


def test_unreachable_broker_fails_within_the_timeout_naming_it(spark):
    with pytest.raises(PySparkException, match=r"127\.0\.0\.1:1 \(kafka\.bootstrap\.servers\) "
                                               r"within 1\.5s"):
        read(spark, {"kafka.bootstrap.servers": "127.0.0.1:1", "subscribe": "x",
                     "kafka.default.api.timeout.ms": "1500"})


def test_topic_that_does_not_exist_is_an_error_not_an_empty_result(spark, broker):
    with pytest.raises(PySparkException, match=r"topic\(s\) no-such-topic \(option "
                                               r"'subscribe'\) do not exist"):
        read(spark, {"kafka.bootstrap.servers": broker.bootstrap,
                     "subscribe": "no-such-topic"})
    with pytest.raises(PySparkException, match=r"partition\(s\) .*-7 \(option 'assign'\)"):
        read(spark, {"kafka.bootstrap.servers": broker.bootstrap,
                     "assign": json.dumps({"no-such-topic": [7]})})


def test_write_without_value_column_or_topic_is_refused(spark, broker, tmp_path):
    df = spark.createDataFrame([("a",)], "payload string")
    with pytest.raises(PySparkException, match="needs a 'value' column"):
        (df.write.format("odradek").option("kafka.bootstrap.servers", broker.bootstrap)
         .option("topic", "t").mode("append").save())
    values = spark.createDataFrame([("a",)], "value string")
    with pytest.raises(PySparkException, match="give the option 'topic' or a 'topic' column"):
        (values.write.format("odradek").option("kafka.bootstrap.servers", broker.bootstrap)
         .mode("append").save())


def test_streaming_read_refuses_an_ending_offset(spark, broker, new_topic, tmp_path):
    df = (spark.readStream.format("odradek")
          .option("kafka.bootstrap.servers", broker.bootstrap)
          .option("subscribe", new_topic()).option("endingOffsets", "latest").load())
    with pytest.raises(PySparkException, match="'endingOffsets' is for batch reads only"):
        query = (df.writeStream.format("memory").queryName("ending")
                 .option("checkpointLocation", str(tmp_path / "ckpt"))
                 .trigger(availableNow=True).start())
        query.awaitTermination(60)


# The same checks without Spark: every message names what to change.
@pytest.mark.parametrize(("options", "streaming", "message"), [
    ({"subscribe": "t", "failondataloss": "maybe"}, False, "must be true or false"),
    ({"subscribe": "t", "subscribepattern": "t.*"}, False, "only one of 'subscribe'"),
    ({"assign": "[1]"}, False, "option 'assign' must be a JSON object"),
    ({"subscribe": "t", "startingoffsets": "{bad"}, False, "'startingOffsets' is not valid JSON"),
    ({"subscribe": "t", "startingoffsets": "latest"}, False, "cannot be latest"),
    ({"subscribe": "t", "endingoffsets": "earliest"}, False, "cannot be earliest"),
    ({"subscribe": "t", "maxoffsetspertrigger": "10"}, False, "for streaming reads only"),
    ({"subscribe": "t", "maxoffsetspertrigger": "0"}, True, "must be a positive integer"),
    ({"subscribe": "t", "minoffsetspertrigger": "9", "maxoffsetspertrigger": "5"}, True,
     "is larger than 'maxOffsetsPerTrigger'"),
    ({"subscribe": "t", "maxtriggerdelay": "soon"}, True, "'maxTriggerDelay' must be a duration"),
    ({"subscribe": "t", "startingtimestamp": "yesterday"}, True, "milliseconds since the epoch"),
    ({"subscribe": "t", "kafka.auto.offset.reset": "earliest"}, True, "set startingOffsets"),
    ({"subscribe": "t", "subscribepattern": "("}, True, "only one of"),
    ({"subscribepattern": "("}, True, "not a valid regular expression"),
])
def test_read_option_errors_name_the_option(options, streaming, message):
    with pytest.raises(OptionError, match=re.escape(message)):
        read_options({**BOOT, **options}, streaming=streaming)


def test_write_option_errors_name_the_option():
    with pytest.raises(OptionError, match="unknown option 'subscribe' for the odradek batch"):
        write_options({**BOOT, "subscribe": "t"}, streaming=False)
    with pytest.raises(OptionError, match=r"'kafka\.value\.serializer' is not supported"):
        write_options({**BOOT, "kafka.value.serializer": "x"}, streaming=True)
    with pytest.raises(OptionError, match="'exactlyOnce' must be true or false"):
        write_options({**BOOT, "exactlyonce": "yes"}, streaming=True)
    with pytest.raises(OptionError, match="'transactionalIdPrefix' needs exactlyOnce=true"):
        write_options({**BOOT, "transactionalidprefix": "p"}, streaming=True)
    with pytest.raises(OptionError, match=re.escape(
            "'kafka.transactional.id' is not supported with exactlyOnce=true")):
        write_options({**BOOT, "exactlyonce": "true", "kafka.transactional.id": "t"},
                      streaming=False)
    opts = write_options({**BOOT, "exactlyonce": "true", "transactionalidprefix": " p "},
                         streaming=True)
    assert opts.exactly_once and opts.transactional_id_prefix == "p"


def test_options_parse_like_sparks_kafka_source():
    opts = read_options({**BOOT, "subscribe": "a, b", "startingoffsets": json.dumps(
        {"a": {"0": 5, "1": -2}}), "maxoffsetspertrigger": "100", "maxtriggerdelay": "30s",
        "kafka.default.api.timeout.ms": "2500", "kafka.fetch.max.bytes": "1000"},
        streaming=True)
    assert opts.topics.names == ("a", "b")
    assert opts.starting.offsets == {("a", 0): 5, ("a", 1): -2}
    assert opts.max_offsets_per_trigger == 100 and opts.max_trigger_delay_s == 30
    assert opts.client.api_timeout_s == 2.5
    assert opts.client.config == {"bootstrap.servers": "127.0.0.1:9", "fetch.max.bytes": "1000"}
    assert opts.fail_on_data_loss and not opts.include_headers


def test_delivery_error_fails_the_write_naming_the_partition(spark, broker, new_topic):
    topic = new_topic(partitions=1)
    df = spark.createDataFrame([("a", 5)], "value string, partition int")
    with pytest.raises(PySparkException, match=rf"{topic}-5: .*Unknown partition") as failed:
        (df.write.format("odradek").option("kafka.bootstrap.servers", broker.bootstrap)
         .option("topic", topic).option("kafka.default.api.timeout.ms", "5000")
         .mode("append").save())
    assert "ProduceFailed" in str(failed.value)


def test_fetch_offset_retries_are_attempted_before_an_unreachable_broker_fails(spark):
    with pytest.raises(PySparkException, match=r"within 0\.5s .*\(3 attempts, "
                                               r"fetchOffset\.numRetries\)"):
        read(spark, {"kafka.bootstrap.servers": "127.0.0.1:1", "subscribe": "x",
                     "kafka.default.api.timeout.ms": "500",
                     "fetchOffset.numRetries": "3", "fetchOffset.retryIntervalMs": "100"})


def test_fetch_offset_options_must_be_numbers():
    base = {"kafka.bootstrap.servers": "127.0.0.1:1", "subscribe": "x"}
    with pytest.raises(OptionError, match=r"'fetchOffset\.numRetries' must be a positive"):
        read_options({**base, "fetchoffset.numretries": "0"}, streaming=True)
    with pytest.raises(OptionError, match=r"'fetchOffset\.retryIntervalMs' must be a non-neg"):
        read_options({**base, "fetchoffset.retryintervalms": "soon"}, streaming=True)
    opts = read_options({**base, "fetchoffset.numretries": "5",
                         "fetchoffset.retryintervalms": "250"}, streaming=True)
    assert (opts.fetch_offset_attempts, opts.fetch_offset_interval_s) == (5, 0.25)
