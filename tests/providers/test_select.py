"""Choosing each channel's provider from EMAIL_PROVIDER, SMS_PROVIDER and PUSH_PROVIDER."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from herald.settings import Settings
from providers import (
    Channel,
    MockProvider,
    OneSignalProvider,
    OutboundMessage,
    SmtpProvider,
    TaqnyatProvider,
    TwilioProvider,
    active_provider,
    provider_chain,
    reset_providers,
)
from tests.support.providers.fakes import FakeTaqnyat, forget_herald_state, use_herald_env


@pytest.fixture(autouse=True)
def fresh_providers() -> Iterator[None]:
    reset_providers()
    yield
    reset_providers()


def test_the_default_is_the_mock_for_every_channel() -> None:
    settings = Settings(email_provider="mock", sms_provider="mock", push_provider="mock")

    providers = {channel: active_provider(channel, settings) for channel in Channel}

    assert all(isinstance(p, MockProvider) for p in providers.values())
    # one instance per settings object, shared by every channel and every call
    assert len({id(p) for p in providers.values()}) == 1
    assert active_provider(Channel.SMS, settings) is providers[Channel.SMS]


def test_each_service_gets_its_configured_provider() -> None:
    settings = Settings(email_provider="smtp", sms_provider="twilio", push_provider="onesignal")

    assert isinstance(active_provider(Channel.EMAIL, settings), SmtpProvider)
    assert isinstance(active_provider(Channel.SMS, settings), TwilioProvider)
    assert isinstance(active_provider(Channel.PUSH, settings), OneSignalProvider)


def test_one_onesignal_instance_serves_all_its_channels() -> None:
    settings = Settings(email_provider="onesignal", sms_provider="onesignal",
                        push_provider="onesignal")

    email, sms, push = (active_provider(c, settings) for c in Channel)

    assert isinstance(email, OneSignalProvider)
    assert email is sms is push


def test_channel_names_are_accepted_and_in_app_has_no_provider() -> None:
    settings = Settings(sms_provider="taqnyat")

    assert isinstance(active_provider("sms", settings), TaqnyatProvider)
    assert active_provider("in_app", settings) is None


def test_a_provider_without_the_channel_gives_none() -> None:
    # the settings' choices all fit their channel; force a misfit past validation
    settings = Settings().model_copy(update={"push_provider": "smtp"})

    assert active_provider(Channel.PUSH, settings) is None


def test_it_reads_the_environment_when_no_settings_are_given(
        monkeypatch: pytest.MonkeyPatch) -> None:
    use_herald_env(monkeypatch, EMAIL_PROVIDER="smtp", SMS_PROVIDER="taqnyat")
    try:
        assert isinstance(active_provider(Channel.EMAIL), SmtpProvider)
        assert isinstance(active_provider(Channel.SMS), TaqnyatProvider)
        assert isinstance(active_provider(Channel.PUSH), MockProvider)
    finally:
        forget_herald_state()


def test_reset_builds_new_providers() -> None:
    settings = Settings(sms_provider="taqnyat")
    before = active_provider(Channel.SMS, settings)

    reset_providers()

    assert active_provider(Channel.SMS, settings) is not before


def test_the_selected_provider_is_the_one_that_sends() -> None:
    with FakeTaqnyat(api_key="key", sender="Herald") as taqnyat:
        settings = Settings(sms_provider="taqnyat", taqnyat_api_key="key",
                            taqnyat_sender="Herald", taqnyat_base_url=taqnyat.url)
        provider = active_provider(Channel.SMS, settings)
        assert provider is not None

        result = provider.send(OutboundMessage(channel=Channel.SMS, to="+966500000001",
                                               text="Hello"))

        assert result.accepted
        assert [m["recipients"] for m in taqnyat.messages] == [["966500000001"]]


def test_a_chain_lists_its_providers_in_order_and_the_single_setting_is_a_chain_of_one(
        ) -> None:
    chained = Settings(sms_providers="taqnyat, twilio", sms_provider="mock")
    single = Settings(sms_provider="twilio")

    assert [p.name for p in provider_chain(Channel.SMS, chained)] == ["taqnyat", "twilio"]
    assert [p.name for p in provider_chain(Channel.SMS, single)] == ["twilio"]
    # the first of the chain sends one-off messages; in-app has no chain
    assert active_provider(Channel.SMS, chained) is provider_chain(Channel.SMS, chained)[0]
    assert provider_chain("in_app", chained) == ()


def test_mock_instances_are_providers_of_their_own_name_usable_in_chains() -> None:
    settings = Settings(mock_instances="mock-a,mock-b", email_providers="mock-a,smtp,mock-b",
                        mock_channels="email,sms")

    chain = provider_chain(Channel.EMAIL, settings)

    assert [p.name for p in chain] == ["mock-a", "smtp", "mock-b"]
    assert isinstance(chain[0], MockProvider) and chain[0] is not chain[2]
    assert chain[0].channels == {Channel.EMAIL, Channel.SMS}  # the mock's channels
    assert settings.mock_provider_configured


@pytest.mark.parametrize(("env", "problem"), [
    ({"SMS_PROVIDERS": "taqnyat,smtp"}, r"SMS_PROVIDERS: 'smtp' cannot carry sms"),
    ({"EMAIL_PROVIDERS": "smtp,mock-c", "MOCK_INSTANCES": "mock-a"},
     r"EMAIL_PROVIDERS: 'mock-c' cannot carry email \(known: smtp, onesignal, mock, mock-a\)"),
    ({"PUSH_PROVIDERS": "mock,mock"}, r"PUSH_PROVIDERS: a provider is named twice"),
    ({"MOCK_INSTANCES": "twilio"}, r"MOCK_INSTANCES: 'twilio' is not a usable instance name"),
])
def test_a_chain_naming_an_unknown_or_unfit_provider_stops_the_start(
        monkeypatch: pytest.MonkeyPatch, env: dict[str, str], problem: str) -> None:
    from herald.settings import SettingsError, load_settings

    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(SettingsError, match=problem):
        load_settings()
