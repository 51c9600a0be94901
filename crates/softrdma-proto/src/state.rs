//! QP attributes and the modify-QP rules: which transitions exist and which attributes each
//! one requires and allows, per transport (IBTA vol. 1, 11.2.5.2, table "QP State Transition
//! Properties"; the same table as Linux `ib_modify_qp_is_ok`).

use crate::types::{AccessFlags, AddressVector, Mtu, QpState, QpType};
use bitflags::bitflags;
use softrdma_wire::{Psn, Qpn};

bitflags! {
    /// Which attributes a modify sets (`enum ibv_qp_attr_mask`, same bits).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct AttrMask: u32 {
        /// New state.
        const STATE = 1;
        /// Expected current state.
        const CUR_STATE = 1 << 1;
        /// Ask for an event when the SQ has drained.
        const EN_SQD_ASYNC_NOTIFY = 1 << 2;
        /// Remote access rights of the QP.
        const ACCESS_FLAGS = 1 << 3;
        /// P_Key index.
        const PKEY_INDEX = 1 << 4;
        /// Port number.
        const PORT = 1 << 5;
        /// Q_Key (UD).
        const QKEY = 1 << 6;
        /// Address vector.
        const AV = 1 << 7;
        /// Path MTU.
        const PATH_MTU = 1 << 8;
        /// Local ACK timeout.
        const TIMEOUT = 1 << 9;
        /// Transport retry count.
        const RETRY_CNT = 1 << 10;
        /// RNR retry count.
        const RNR_RETRY = 1 << 11;
        /// Receive PSN.
        const RQ_PSN = 1 << 12;
        /// Outstanding READs/atomics as requester.
        const MAX_QP_RD_ATOMIC = 1 << 13;
        /// Alternate path (not supported on RoCE: never allowed here).
        const ALT_PATH = 1 << 14;
        /// RNR NAK timer the responder sends.
        const MIN_RNR_TIMER = 1 << 15;
        /// Send PSN.
        const SQ_PSN = 1 << 16;
        /// Outstanding READs/atomics as responder.
        const MAX_DEST_RD_ATOMIC = 1 << 17;
        /// Path migration state (not supported: never allowed here).
        const PATH_MIG_STATE = 1 << 18;
        /// Capabilities (not modifiable).
        const CAP = 1 << 19;
        /// Destination QP.
        const DEST_QPN = 1 << 20;
    }
}

/// Largest `max_rd_atomic` / `max_dest_rd_atomic`, as rxe (`RXE_MAX_QP_RD_ATOM`).
pub const MAX_RD_ATOMIC: u8 = 128;

/// A typed modify-QP request: each `Some` field is an attribute to set.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct QpAttr {
    /// New state; `None` keeps the current one (a modify within the state).
    pub state: Option<QpState>,
    /// The state the caller believes the QP is in.
    pub cur_state: Option<QpState>,
    /// Ask for [`crate::AsyncEvent::SqDrained`].
    pub en_sqd_async_notify: Option<bool>,
    /// Remote access rights.
    pub access_flags: Option<AccessFlags>,
    /// P_Key index (the table has one entry, 0xFFFF).
    pub pkey_index: Option<u16>,
    /// Port number (1).
    pub port: Option<u8>,
    /// Q_Key.
    pub qkey: Option<u32>,
    /// Addresses.
    pub av: Option<AddressVector>,
    /// Path MTU.
    pub path_mtu: Option<Mtu>,
    /// Local ACK timeout exponent, 0-31 (0: infinite).
    pub timeout: Option<u8>,
    /// Transport retries, 0-7.
    pub retry_cnt: Option<u8>,
    /// RNR retries, 0-7 (7: infinite).
    pub rnr_retry: Option<u8>,
    /// Expected receive PSN.
    pub rq_psn: Option<Psn>,
    /// Outstanding READs/atomics as requester.
    pub max_rd_atomic: Option<u8>,
    /// RNR timer code sent in RNR NAKs, 0-31.
    pub min_rnr_timer: Option<u8>,
    /// First send PSN.
    pub sq_psn: Option<Psn>,
    /// Outstanding READs/atomics as responder.
    pub max_dest_rd_atomic: Option<u8>,
    /// Destination QP.
    pub dest_qpn: Option<Qpn>,
}

impl QpAttr {
    /// The attributes this request sets.
    pub fn mask(&self) -> AttrMask {
        let mut m = AttrMask::empty();
        let mut set = |on: bool, bit| m.set(bit, on);
        set(self.state.is_some(), AttrMask::STATE);
        set(self.cur_state.is_some(), AttrMask::CUR_STATE);
        set(
            self.en_sqd_async_notify.is_some(),
            AttrMask::EN_SQD_ASYNC_NOTIFY,
        );
        set(self.access_flags.is_some(), AttrMask::ACCESS_FLAGS);
        set(self.pkey_index.is_some(), AttrMask::PKEY_INDEX);
        set(self.port.is_some(), AttrMask::PORT);
        set(self.qkey.is_some(), AttrMask::QKEY);
        set(self.av.is_some(), AttrMask::AV);
        set(self.path_mtu.is_some(), AttrMask::PATH_MTU);
        set(self.timeout.is_some(), AttrMask::TIMEOUT);
        set(self.retry_cnt.is_some(), AttrMask::RETRY_CNT);
        set(self.rnr_retry.is_some(), AttrMask::RNR_RETRY);
        set(self.rq_psn.is_some(), AttrMask::RQ_PSN);
        set(self.max_rd_atomic.is_some(), AttrMask::MAX_QP_RD_ATOMIC);
        set(self.min_rnr_timer.is_some(), AttrMask::MIN_RNR_TIMER);
        set(self.sq_psn.is_some(), AttrMask::SQ_PSN);
        set(
            self.max_dest_rd_atomic.is_some(),
            AttrMask::MAX_DEST_RD_ATOMIC,
        );
        set(self.dest_qpn.is_some(), AttrMask::DEST_QPN);
        m
    }
}

/// Why a modify was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ModifyError {
    /// The transition does not exist for this transport.
    #[error("modify_qp: {from} -> {to} is not a valid transition for a {qp_type:?} QP")]
    InvalidTransition {
        /// Current state.
        from: QpState,
        /// Requested state.
        to: QpState,
        /// Transport.
        qp_type: QpType,
    },
    /// Required attributes are missing.
    #[error("modify_qp: {from} -> {to} requires attributes {missing:?}")]
    MissingAttributes {
        /// Current state.
        from: QpState,
        /// Requested state.
        to: QpState,
        /// What is missing.
        missing: AttrMask,
    },
    /// Attributes were given that the transition does not allow.
    #[error("modify_qp: {from} -> {to} does not allow attributes {extra:?}")]
    ExtraAttributes {
        /// Current state.
        from: QpState,
        /// Requested state.
        to: QpState,
        /// What is not allowed.
        extra: AttrMask,
    },
    /// `cur_state` disagrees with the QP.
    #[error("modify_qp: cur_state {given} does not match the QP's state {actual}")]
    CurStateMismatch {
        /// What the caller said.
        given: QpState,
        /// What the QP is in.
        actual: QpState,
    },
    /// An attribute value is out of range.
    #[error("modify_qp: attribute {attr} = {value} is out of range")]
    InvalidValue {
        /// Attribute name as in `struct ibv_qp_attr`.
        attr: &'static str,
        /// The value given.
        value: u64,
    },
}

/// The attributes `from -> to` requires and allows (besides STATE), or `None` if the
/// transition does not exist for `qp_type`.
pub fn transition_rules(
    qp_type: QpType,
    from: QpState,
    to: QpState,
) -> Option<(AttrMask, AttrMask)> {
    use AttrMask as A;
    use QpState::*;
    let none = A::empty();
    let rc = qp_type == QpType::Rc;
    let ud = qp_type == QpType::Ud;
    // Attributes that belong to connected QPs only, or to UD only.
    let conn_or_qkey = if ud { A::QKEY } else { A::ACCESS_FLAGS };
    Some(match (from, to) {
        (_, Reset) | (_, Error) => (none, none),
        (Reset, Init) => (A::PKEY_INDEX | A::PORT | conn_or_qkey, none),
        (Init, Init) => (none, A::PKEY_INDEX | A::PORT | conn_or_qkey),
        (Init, Rtr) => {
            let req = match qp_type {
                QpType::Rc => {
                    A::AV
                        | A::PATH_MTU
                        | A::DEST_QPN
                        | A::RQ_PSN
                        | A::MAX_DEST_RD_ATOMIC
                        | A::MIN_RNR_TIMER
                }
                QpType::Uc => A::AV | A::PATH_MTU | A::DEST_QPN | A::RQ_PSN,
                QpType::Ud => none,
            };
            let opt = if ud {
                A::PKEY_INDEX | A::QKEY
            } else {
                A::ACCESS_FLAGS | A::PKEY_INDEX
            };
            (req, opt)
        }
        (Rtr, Rts) => {
            let req = if rc {
                A::SQ_PSN | A::TIMEOUT | A::RETRY_CNT | A::RNR_RETRY | A::MAX_QP_RD_ATOMIC
            } else {
                A::SQ_PSN
            };
            (req, rts_optional(qp_type))
        }
        (Rts, Rts) | (Sqd, Rts) => (none, rts_optional(qp_type)),
        (Rts, Sqd) => (none, A::EN_SQD_ASYNC_NOTIFY),
        (Sqd, Sqd) => {
            let opt = match qp_type {
                QpType::Rc => {
                    A::AV
                        | A::ACCESS_FLAGS
                        | A::PKEY_INDEX
                        | A::MIN_RNR_TIMER
                        | A::TIMEOUT
                        | A::RETRY_CNT
                        | A::RNR_RETRY
                        | A::MAX_QP_RD_ATOMIC
                        | A::MAX_DEST_RD_ATOMIC
                }
                QpType::Uc => A::AV | A::ACCESS_FLAGS | A::PKEY_INDEX,
                QpType::Ud => A::PKEY_INDEX | A::QKEY,
            };
            (none, opt)
        }
        (Sqe, Rts) if !rc => (none, A::CUR_STATE | conn_or_qkey),
        _ => return None,
    })
}

fn rts_optional(qp_type: QpType) -> AttrMask {
    use AttrMask as A;
    match qp_type {
        QpType::Rc => A::CUR_STATE | A::ACCESS_FLAGS | A::MIN_RNR_TIMER,
        QpType::Uc => A::CUR_STATE | A::ACCESS_FLAGS,
        QpType::Ud => A::CUR_STATE | A::QKEY,
    }
}

/// Checks a modify against the table and the value ranges; returns the target state.
pub fn check_modify(
    qp_type: QpType,
    current: QpState,
    attr: &QpAttr,
) -> Result<QpState, ModifyError> {
    let to = attr.state.unwrap_or(current);
    if let Some(given) = attr.cur_state {
        if given != current {
            return Err(ModifyError::CurStateMismatch {
                given,
                actual: current,
            });
        }
    }
    let (required, optional) =
        transition_rules(qp_type, current, to).ok_or(ModifyError::InvalidTransition {
            from: current,
            to,
            qp_type,
        })?;
    let given = attr.mask() - AttrMask::STATE;
    let missing = required - given;
    if !missing.is_empty() {
        return Err(ModifyError::MissingAttributes {
            from: current,
            to,
            missing,
        });
    }
    let extra = given - required - optional;
    if !extra.is_empty() {
        return Err(ModifyError::ExtraAttributes {
            from: current,
            to,
            extra,
        });
    }
    let range = |attr: &'static str, v: Option<u8>, max: u8| match v {
        Some(v) if v > max => Err(ModifyError::InvalidValue {
            attr,
            value: v.into(),
        }),
        _ => Ok(()),
    };
    range("timeout", attr.timeout, 31)?;
    range("retry_cnt", attr.retry_cnt, 7)?;
    range("rnr_retry", attr.rnr_retry, 7)?;
    range("min_rnr_timer", attr.min_rnr_timer, 31)?;
    range("max_rd_atomic", attr.max_rd_atomic, MAX_RD_ATOMIC)?;
    range("max_dest_rd_atomic", attr.max_dest_rd_atomic, MAX_RD_ATOMIC)?;
    if let Some(p) = attr.port {
        if p != 1 {
            return Err(ModifyError::InvalidValue {
                attr: "port_num",
                value: p.into(),
            });
        }
    }
    if let Some(i) = attr.pkey_index {
        if i != 0 {
            return Err(ModifyError::InvalidValue {
                attr: "pkey_index",
                value: i.into(),
            });
        }
    }
    Ok(to)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn rtr_rc() -> QpAttr {
        QpAttr {
            state: Some(QpState::Rtr),
            av: Some(AddressVector {
                src: Ipv4Addr::LOCALHOST.into(),
                dst: Ipv4Addr::LOCALHOST.into(),
                flow_label: 0,
                traffic_class: 0,
            }),
            path_mtu: Some(Mtu::M1024),
            dest_qpn: Some(Qpn::new(0x11)),
            rq_psn: Some(Psn::new(0)),
            max_dest_rd_atomic: Some(1),
            min_rnr_timer: Some(12),
            ..Default::default()
        }
    }

    #[test]
    fn rc_rtr_requires_its_attributes() {
        assert_eq!(
            check_modify(QpType::Rc, QpState::Init, &rtr_rc()),
            Ok(QpState::Rtr)
        );
        let mut a = rtr_rc();
        a.min_rnr_timer = None;
        a.path_mtu = None;
        let e = check_modify(QpType::Rc, QpState::Init, &a).unwrap_err();
        assert_eq!(
            e,
            ModifyError::MissingAttributes {
                from: QpState::Init,
                to: QpState::Rtr,
                missing: AttrMask::PATH_MTU | AttrMask::MIN_RNR_TIMER
            }
        );
        assert_eq!(
            e.to_string(),
            "modify_qp: INIT -> RTR requires attributes AttrMask(PATH_MTU | MIN_RNR_TIMER)"
        );
    }

    #[test]
    fn extra_attributes_and_bad_transitions_are_named() {
        let mut a = rtr_rc();
        a.sq_psn = Some(Psn::new(1));
        assert!(matches!(
            check_modify(QpType::Rc, QpState::Init, &a),
            Err(ModifyError::ExtraAttributes { extra, .. }) if extra == AttrMask::SQ_PSN
        ));
        let a = QpAttr {
            state: Some(QpState::Rts),
            ..Default::default()
        };
        assert_eq!(
            check_modify(QpType::Rc, QpState::Reset, &a),
            Err(ModifyError::InvalidTransition {
                from: QpState::Reset,
                to: QpState::Rts,
                qp_type: QpType::Rc
            })
        );
        // SQE exists for UC and UD only.
        assert!(check_modify(QpType::Rc, QpState::Sqe, &a).is_err());
        assert!(check_modify(QpType::Ud, QpState::Sqe, &a).is_ok());
    }

    #[test]
    fn ud_needs_qkey_not_access_flags() {
        let a = QpAttr {
            state: Some(QpState::Init),
            pkey_index: Some(0),
            port: Some(1),
            qkey: Some(0x1111_1111),
            ..Default::default()
        };
        assert_eq!(
            check_modify(QpType::Ud, QpState::Reset, &a),
            Ok(QpState::Init)
        );
        assert!(check_modify(QpType::Rc, QpState::Reset, &a).is_err());
        let rtr = QpAttr {
            state: Some(QpState::Rtr),
            ..Default::default()
        };
        assert_eq!(
            check_modify(QpType::Ud, QpState::Init, &rtr),
            Ok(QpState::Rtr)
        );
    }

    #[test]
    fn values_are_range_checked() {
        let a = QpAttr {
            state: Some(QpState::Rts),
            sq_psn: Some(Psn::new(0)),
            timeout: Some(14),
            retry_cnt: Some(8),
            rnr_retry: Some(7),
            max_rd_atomic: Some(1),
            ..Default::default()
        };
        assert_eq!(
            check_modify(QpType::Rc, QpState::Rtr, &a),
            Err(ModifyError::InvalidValue {
                attr: "retry_cnt",
                value: 8
            })
        );
    }

    #[test]
    fn any_state_goes_to_error_and_reset() {
        for from in [
            QpState::Reset,
            QpState::Init,
            QpState::Rtr,
            QpState::Rts,
            QpState::Sqd,
            QpState::Error,
        ] {
            for to in [QpState::Error, QpState::Reset] {
                let a = QpAttr {
                    state: Some(to),
                    ..Default::default()
                };
                assert_eq!(check_modify(QpType::Rc, from, &a), Ok(to));
            }
        }
    }
}
