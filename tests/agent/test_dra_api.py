"""The kubelet's registration and DRA v1 messages, hand-described (dra_api.py), encode
to the bytes the protos define: field numbers checked against a hand-made encoding,
maps of messages keyed by claim uid, and round trips."""

from __future__ import annotations

from scheduler.agent import dra_api as api


def test_a_claim_is_encoded_with_the_protos_field_numbers() -> None:
    # Claim{namespace=1, uid=2, name=3} inside NodePrepareResourcesRequest.claims=1.
    claim = b"\x0a\x02ns" + b"\x12\x01u" + b"\x1a\x01c"
    assert api.encode_prepare_request((api.Claim("ns", "u", "c"),)) == (
        b"\x0a" + bytes([len(claim)]) + claim
    )


def test_plugin_info_uses_the_registration_field_numbers() -> None:
    info = api.PluginInfo("DRAPlugin", "d", "/e", ("v1.DRAPlugin",))
    assert api.encode_plugin_info(info) == (
        b"\x0a\x09DRAPlugin" + b"\x12\x01d" + b"\x1a\x02/e" + b"\x22\x0cv1.DRAPlugin"
    )


def test_responses_round_trip() -> None:
    prepared = api.PrepareResponse(
        {
            "uid-1": api.PrepareResult(
                (api.PreparedDevice(("gpu",), "node", "gpu-0", ("k/claim=uid-1-0",), "share"),)
            ),
            "uid-2": api.PrepareResult(error="refused"),
        }
    )
    assert api.decode_prepare_response(api.encode_prepare_response(prepared)) == prepared
    unprepared = api.UnprepareResponse(
        {"uid-1": api.UnprepareResult(), "uid-2": api.UnprepareResult("x")}
    )
    assert api.decode_unprepare_response(api.encode_unprepare_response(unprepared)) == unprepared
    status = api.RegistrationStatus(False, "no")
    assert api.decode_registration_status(api.encode_registration_status(status)) == status
