"""The approval gate: scan manifest, producer pins, the approval chain, request, gate,
signed records and ApprovedDataset.

Importing this package imports neither torch nor numpy; the approved loader asks for
torch when it is built.
"""

from trainvault.approval.approved import ApprovalRecordRef, ApprovedDataset
from trainvault.approval.attestation import (
    REPORT_ATTESTATION_NAME,
    SCAN_ATTESTATION_NAME,
    Attested,
    attestation_statement,
    read_attested,
    write_attestation,
)
from trainvault.approval.chain import ApprovalChain, build_approval_chain
from trainvault.approval.dsse import STATEMENT_TYPE, Envelope, pae, sign_envelope, verify_envelope
from trainvault.approval.gate import approve_dataset
from trainvault.approval.guard import CustodyStore
from trainvault.approval.hashing import HashedObject, HashProgress, hash_objects, terminal_hash_progress
from trainvault.approval.keys import (
    SIGNING_KEY_ENV,
    SigningKey,
    VerifyingKey,
    load_signing_key,
    load_verifying_key,
    write_keypair,
)
from trainvault.approval.pins import (
    PINS_NAME,
    PackagePin,
    ProducerPins,
    collect_producer_pins,
    git_revision,
    write_producer_pins,
)
from trainvault.approval.policy import ApprovalPolicy
from trainvault.approval.record import (
    APPROVAL_NAME,
    PREDICATE_TYPE,
    WrittenApproval,
    approval_statement,
    open_approved,
    with_record,
    write_approval,
)
from trainvault.approval.request import ApprovalRequest
from trainvault.approval.rescan import RescanSummary
from trainvault.approval.result import AttestationSummary, ExclusionSummary, VerificationSummary
from trainvault.approval.scan_manifest import (
    SCAN_MANIFEST_NAME,
    ScannedFile,
    ScanTotals,
    TrainingScanManifest,
    build_training_scan_manifest,
    write_training_scan_manifest,
)

__all__ = [
    "APPROVAL_NAME",
    "PINS_NAME",
    "PREDICATE_TYPE",
    "REPORT_ATTESTATION_NAME",
    "SCAN_ATTESTATION_NAME",
    "SCAN_MANIFEST_NAME",
    "SIGNING_KEY_ENV",
    "STATEMENT_TYPE",
    "ApprovalChain",
    "ApprovalPolicy",
    "ApprovalRecordRef",
    "ApprovalRequest",
    "ApprovedDataset",
    "AttestationSummary",
    "Attested",
    "CustodyStore",
    "Envelope",
    "ExclusionSummary",
    "HashProgress",
    "HashedObject",
    "PackagePin",
    "ProducerPins",
    "RescanSummary",
    "ScanTotals",
    "ScannedFile",
    "SigningKey",
    "TrainingScanManifest",
    "VerificationSummary",
    "VerifyingKey",
    "WrittenApproval",
    "approval_statement",
    "approve_dataset",
    "attestation_statement",
    "build_approval_chain",
    "build_training_scan_manifest",
    "collect_producer_pins",
    "git_revision",
    "hash_objects",
    "load_signing_key",
    "load_verifying_key",
    "open_approved",
    "pae",
    "read_attested",
    "sign_envelope",
    "terminal_hash_progress",
    "verify_envelope",
    "with_record",
    "write_approval",
    "write_attestation",
    "write_keypair",
    "write_producer_pins",
    "write_training_scan_manifest",
]
