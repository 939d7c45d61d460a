"""The approval gate: scan manifest, producer pins, the approval chain, request, gate,
signed records and ApprovedDataset.

Importing this package imports neither torch nor numpy; the approved loader asks for
torch when it is built.
"""

from trainvault.approval.approved import ApprovedDataset
from trainvault.approval.approved_loader import ApprovedLoaderFactory
from trainvault.approval.attestation import (
    REPORT_ATTESTATION_NAME,
    SCAN_ATTESTATION_NAME,
    read_attested,
    write_attestation,
)
from trainvault.approval.chain import ApprovalChain, build_approval_chain
from trainvault.approval.keys import SigningKey, VerifyingKey, load_signing_key, load_verifying_key, write_keypair
from trainvault.approval.pins import ProducerPins, collect_producer_pins, write_producer_pins
from trainvault.approval.policy import ApprovalPolicy
from trainvault.approval.record import with_record, write_approval
from trainvault.approval.request import ApprovalRequest
from trainvault.approval.scan_manifest import build_training_scan_manifest, write_training_scan_manifest

__all__ = [
    "REPORT_ATTESTATION_NAME",
    "SCAN_ATTESTATION_NAME",
    "ApprovalChain",
    "ApprovalPolicy",
    "ApprovalRequest",
    "ApprovedDataset",
    "ApprovedLoaderFactory",
    "ProducerPins",
    "SigningKey",
    "VerifyingKey",
    "build_approval_chain",
    "build_training_scan_manifest",
    "collect_producer_pins",
    "load_signing_key",
    "load_verifying_key",
    "read_attested",
    "with_record",
    "write_approval",
    "write_attestation",
    "write_keypair",
    "write_producer_pins",
    "write_training_scan_manifest",
]
